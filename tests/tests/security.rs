//! Security: how trace files are created, and what they may contain.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::time::Duration;
use support::{listing, run_within, succeeded, traced, vramtrace_lines};

const LIMIT: Duration = Duration::from_secs(120);

/// Mode 0600 even with umask 0 (the mode is given explicitly, not left to the umask).
#[test]
fn trace_files_are_private_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = traced("fork_exec", &[], &format!("{}/", dir.path().display()));
    // SAFETY: umask is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let out = run_within(&mut cmd, LIMIT);
    succeeded(&out);
    let names = listing(dir.path());
    assert_eq!(names.len(), 3, "parent, forked and exec'd child: {names:?}");
    for name in names {
        let meta = std::fs::symlink_metadata(dir.path().join(&name)).unwrap();
        assert!(meta.file_type().is_file(), "{name}");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "{name}");
        // SAFETY: geteuid has no preconditions.
        assert_eq!(meta.uid(), unsafe { libc::geteuid() }, "{name}");
    }
}

/// Exclusive creation: an existing file of the same name is never opened, let alone
/// truncated; the trace goes to the next numbered name.
#[test]
fn an_existing_file_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let name = dir.path().join("trace.jsonl");
    std::fs::write(&name, b"an older trace\n").unwrap();
    std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run_within(
        &mut traced("runtime_dynamic", &[], &name.display().to_string()),
        LIMIT,
    );
    assert!(out.status.success());
    assert!(vramtrace_lines(&out.stderr).is_empty(), "no warning");
    assert_eq!(std::fs::read(&name).unwrap(), b"an older trace\n");
    assert_eq!(
        std::fs::metadata(&name).unwrap().permissions().mode() & 0o777,
        0o644
    );
    assert_eq!(listing(dir.path()), ["trace.1.jsonl", "trace.jsonl"]);
    let text = std::fs::read_to_string(dir.path().join("trace.1.jsonl")).unwrap();
    assert!(text.starts_with("{\"format\":\"vramtrace\""));
}

/// No-follow: a symlink planted where the trace will go (to a file the attacker wants
/// written, or to a name that does not exist yet) is refused; see also faults.rs.
#[test]
fn a_planted_symlink_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("authorized_keys");
    let planted = dir.path().join("trace.jsonl");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let out = run_within(
        &mut traced("runtime_dynamic", &[], &planted.display().to_string()),
        LIMIT,
    );
    assert!(out.status.success());
    assert_eq!(vramtrace_lines(&out.stderr).len(), 1);
    assert!(!victim.exists(), "nothing was created through the link");
    assert_eq!(listing(dir.path()), ["trace.jsonl"]);
}

/// Only the documented variables reach a trace: secrets in the environment of the
/// parent, a forked child and an exec'd child appear in no file, while the documented
/// ones (the positive control) do.
#[test]
fn no_undocumented_environment_variable_reaches_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = [
        ("AWS_SECRET_ACCESS_KEY", "vt-secret-123"),
        ("HF_TOKEN", "hf_vtsecret456"),
        ("WANDB_API_KEY", "vt-wandb-789"),
        ("VRAMTRACE_SECRET_LOOKALIKE", "vt-lookalike-000"),
    ];
    let mut cmd = traced("fork_exec", &[], &format!("{}/", dir.path().display()));
    cmd.env("RANK", "3").env("WORLD_SIZE", "8");
    for (k, v) in secrets {
        cmd.env(k, v);
    }
    let out = run_within(&mut cmd, LIMIT);
    succeeded(&out);
    let names = listing(dir.path());
    assert_eq!(names.len(), 3, "{names:?}");
    for name in &names {
        let raw = std::fs::read(dir.path().join(name)).unwrap();
        let text = String::from_utf8_lossy(&raw);
        for (k, v) in secrets {
            assert!(!text.contains(v), "{name} holds the value of {k}");
            assert!(!text.contains(k), "{name} names {k}");
        }
        let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(
            header["env"],
            serde_json::json!({"RANK": "3", "WORLD_SIZE": "8"}),
            "{name}: exactly the documented variables that were set"
        );
    }
}

/// Secrets on the command line never reach the trace: the values of `--hf-token=`,
/// `--password X`, `--api-key X`, `HF_TOKEN=` and a URL's password are replaced in the
/// header, and appear nowhere in the file; the other arguments (the control) are kept.
#[test]
fn command_line_secrets_are_redacted_before_the_header_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--hf-token=vt-secret-1",
        "--password",
        "vt-secret-2",
        "--api-key",
        "vt-secret-3",
        "HF_TOKEN=vt-secret-4",
        "https://me:vt-secret-5@example.org/x",
        "--tokenizer",
        "gpt2",
        "--lr",
        "3",
    ];
    let out = run_within(
        &mut traced(
            "runtime_dynamic",
            &args,
            &format!("{}/", dir.path().display()),
        ),
        LIMIT,
    );
    succeeded(&out);
    let names = listing(dir.path());
    assert_eq!(names.len(), 1, "{names:?}");
    let text = std::fs::read_to_string(dir.path().join(&names[0])).unwrap();
    assert!(!text.contains("vt-secret"), "a secret reached the trace");
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let argv: Vec<&str> = header["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(argv[0].ends_with("runtime_dynamic"), "{argv:?}");
    assert_eq!(
        argv[1..],
        [
            "--hf-token=<redacted>",
            "--password",
            "<redacted>",
            "--api-key",
            "<redacted>",
            "HF_TOKEN=<redacted>",
            "https://me:<redacted>@example.org/x",
            "--tokenizer",
            "gpt2",
            "--lr",
            "3",
        ]
    );
}
