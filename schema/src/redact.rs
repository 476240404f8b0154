//! Secrets on a command line: `--hf-token=hf_...`, `--password hunter2`, `API_KEY=...`,
//! `https://user:pass@host`. A trace records the command line (its header's `argv`) and
//! is meant to be attached to bug reports, so their values are replaced by
//! [`REDACTED`] before the header is written, and again when an older trace is read.
//!
//! The rule (docs/trace-format.md):
//! - an option or assignment whose name, split into words at `-`, `_` and `.`, has a word
//!   `token`, `password`, `passwd`, `secret`, `credential(s)`, `auth`, `authorization`,
//!   `apikey`, `accesskey`, `secretkey`, `privatekey`, or ends with the word `key`
//!   (`--api-key`, `--access_key`, `AWS_SECRET_ACCESS_KEY`, but not `--key-frames`,
//!   `--tokenizer` or `--max-tokens`);
//! - in the forms `--name=value`, `-name=value`, `NAME=value`, and `--name value` (the
//!   next argument, unless it is an option itself: `--`-prefixed);
//! - and in any argument, a URL's password (`scheme://user:<redacted>@host`), or its whole
//!   user part when it has no password (a token used as the user name).

/// What a secret is replaced by.
pub const REDACTED: &str = "<redacted>";

/// Words of an option name that mark its value as a secret.
const SECRET_WORDS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "secret",
    "credential",
    "credentials",
    "auth",
    "authorization",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
];

/// Whether an option or variable called `name` (dashes included) holds a secret.
fn secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-').to_ascii_lowercase();
    let words: Vec<&str> = name
        .split(['-', '_', '.'])
        .filter(|w| !w.is_empty())
        .collect();
    words.iter().any(|w| SECRET_WORDS.contains(w)) || words.last() == Some(&"key")
}

/// Whether `s` can be an option or variable name (before a `=`).
fn name_like(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `arg` with URL passwords (or token user names) replaced.
fn redact_urls(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(i) = rest.find("://") {
        let (before, after) = rest.split_at(i + 3);
        out.push_str(before);
        let end = after.find(['/', '?', '#', ' ']).unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(at) => {
                let user = &authority[..at];
                match user.find(':') {
                    Some(colon) => {
                        out.push_str(&user[..=colon]);
                        out.push_str(REDACTED);
                    }
                    None => out.push_str(REDACTED),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// A command line with its secrets' values replaced by [`REDACTED`]; everything else
/// as it was. Applying it twice changes nothing more.
pub fn argv(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut value_next = false;
    for arg in args {
        if std::mem::take(&mut value_next) && !arg.starts_with("--") {
            out.push(REDACTED.to_string());
            continue;
        }
        if let Some((name, _)) = arg.split_once('=') {
            if name_like(name) && secret_name(name) {
                out.push(format!("{name}={REDACTED}"));
                continue;
            }
        } else if arg.starts_with("--") && name_like(arg) && secret_name(arg) {
            value_next = true;
        }
        out.push(redact_urls(arg));
    }
    out
}

/// For `#[serde(serialize_with)]`: the header's `argv`, redacted as it is written.
pub fn serialize<S: serde::Serializer>(args: &[String], s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&argv(args), s)
}

/// For `#[serde(deserialize_with)]`: the header's `argv`, redacted as it is read (traces
/// written before redaction, or by another writer).
pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let args: Vec<String> = serde::Deserialize::deserialize(d)?;
    Ok(argv(&args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(args: &[&str]) -> Vec<String> {
        argv(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn option_values_both_forms() {
        assert_eq!(
            r(&[
                "train.py",
                "--hf-token=hf_abc",
                "--password",
                "hunter2",
                "--lr",
                "3"
            ]),
            [
                "train.py",
                "--hf-token=<redacted>",
                "--password",
                "<redacted>",
                "--lr",
                "3"
            ]
        );
        assert_eq!(
            r(&[
                "--api-key",
                "X",
                "--access_key=Y",
                "--auth",
                "u:p",
                "--client-secret",
                "Z"
            ]),
            [
                "--api-key",
                "<redacted>",
                "--access_key=<redacted>",
                "--auth",
                "<redacted>",
                "--client-secret",
                "<redacted>"
            ]
        );
    }

    #[test]
    fn assignments() {
        assert_eq!(
            r(&[
                "env",
                "HF_TOKEN=hf_x",
                "AWS_SECRET_ACCESS_KEY=s",
                "trainer.api_key=k",
                "RANK=0"
            ]),
            [
                "env",
                "HF_TOKEN=<redacted>",
                "AWS_SECRET_ACCESS_KEY=<redacted>",
                "trainer.api_key=<redacted>",
                "RANK=0"
            ]
        );
    }

    #[test]
    fn names_that_only_look_alike_are_kept() {
        let args = [
            "--tokenizer",
            "gpt2",
            "--max-tokens",
            "128",
            "--key-frames",
            "4",
            "--keyframes=2",
            "--monkey",
            "m",
            "--author",
            "me",
        ];
        assert_eq!(r(&args), args);
    }

    #[test]
    fn a_flag_followed_by_an_option_takes_no_value() {
        assert_eq!(r(&["--auth", "--verbose"]), ["--auth", "--verbose"]);
        assert_eq!(r(&["--token"]), ["--token"]);
    }

    #[test]
    fn urls_lose_their_passwords() {
        assert_eq!(
            r(&[
                "--db=postgres://me:pw@db:5432/x",
                "https://ghp_tok@github.com/o/r",
                "http://h/a@b"
            ]),
            [
                "--db=postgres://me:<redacted>@db:5432/x",
                "https://<redacted>@github.com/o/r",
                "http://h/a@b"
            ]
        );
    }

    #[test]
    fn twice_is_once() {
        let once = r(&["--password", "p", "--token=t", "s3://a:b@c"]);
        assert_eq!(argv(&once), once);
    }
}
