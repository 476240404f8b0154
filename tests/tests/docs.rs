//! The README and the user guide (docs/guide/) against the command line: every
//! `vramtrace SUB ...` line of their `sh` blocks names a subcommand and only options that
//! `vramtrace SUB --help` lists, and every relative link points at a file that exists.

use std::collections::HashMap;
use std::process::Command;
use vramtrace_tests::harness::vramtrace;
use vramtrace_tests::pages::{pages, root, sh_lines};

/// What `--help` lists of a command's options: each long and short name, and whether it
/// takes a value.
#[derive(Default)]
struct Options {
    takes_value: HashMap<String, bool>,
}

impl Options {
    /// Reads the option lines of clap's help (`  -o, --output <FILE>`, `      --json`).
    fn parse(help: &str) -> Options {
        let mut takes_value = HashMap::new();
        for line in help.lines() {
            let line = line.trim_start();
            let Some(second) = line.chars().nth(1) else {
                continue;
            };
            if !line.starts_with('-') || !(second == '-' || second.is_ascii_alphanumeric()) {
                continue;
            }
            // The names and value come before the two spaces that start a description.
            let head = line.split("  ").next().unwrap_or(line);
            let value = head.contains('<');
            for name in head
                .split([',', ' '])
                .take_while(|w| w.is_empty() || w.starts_with('-'))
                .filter(|w| w.starts_with('-'))
            {
                takes_value.insert(name.to_string(), value);
            }
        }
        Options { takes_value }
    }

    fn get(&self, flag: &str) -> Option<bool> {
        self.takes_value.get(flag).copied()
    }
}

/// `vramtrace [SUB] --help`, read once per command; `None` when it is no subcommand.
struct Help {
    cache: HashMap<String, Option<Options>>,
}

impl Help {
    fn of(&mut self, sub: &str) -> Option<&Options> {
        self.cache
            .entry(sub.to_string())
            .or_insert_with(|| {
                let mut cmd = Command::new(vramtrace());
                if !sub.is_empty() {
                    cmd.arg(sub);
                }
                let out = cmd.arg("--help").output().expect("vramtrace runs");
                out.status
                    .success()
                    .then(|| Options::parse(&String::from_utf8_lossy(&out.stdout)))
            })
            .as_ref()
    }
}

/// The options a shell line gives vramtrace, checked against `--help`: `Err` says what
/// is wrong; `Ok(None)` when the line does not run vramtrace.
fn check_line(line: &str, help: &mut Help) -> Result<Option<String>, String> {
    // The comment is checked too: the options it names are the subcommand's.
    let (code, comment) = match line.find(" #") {
        Some(at) => (&line[..at], &line[at + 2..]),
        None if line.trim_start().starts_with('#') => ("", line),
        None => (line, ""),
    };
    let words: Vec<&str> = code.split_whitespace().collect();
    let Some(at) = words
        .iter()
        .position(|w| *w == "vramtrace" || w.ends_with("/vramtrace"))
    else {
        return Ok(None);
    };
    let mut rest = words[at + 1..].iter().copied().peekable();
    // Global options before the subcommand (`vramtrace --version`, `--run ID`).
    let mut sub = String::new();
    while let Some(w) = rest.next() {
        if !w.starts_with('-') {
            sub = w.to_string();
            break;
        }
        let name = w.split('=').next().unwrap_or(w);
        let top = help.of("").expect("vramtrace --help succeeds");
        match top.get(name) {
            None => return Err(format!("`vramtrace --help` has no {name}")),
            Some(true) if !w.contains('=') => {
                rest.next();
            }
            Some(_) => {}
        }
    }
    if sub.is_empty() {
        return Ok(Some("vramtrace".into()));
    }
    let Some(options) = help.of(&sub) else {
        return Err(format!("`{sub}` is no subcommand of vramtrace"));
    };
    // `run`'s own options end at the command it runs, whose options are its own.
    let ends_at_command = sub == "run";
    while let Some(w) = rest.next() {
        if matches!(w, "|" | "||" | "&&" | ";" | "&") || w.starts_with('>') || w.starts_with("2>") {
            break;
        }
        if w == "--" {
            if ends_at_command {
                break;
            }
            continue;
        }
        if !w.starts_with('-') || w == "-" {
            if ends_at_command {
                break;
            }
            continue;
        }
        let name = w.split('=').next().unwrap_or(w);
        match options.get(name) {
            None => return Err(format!("`vramtrace {sub} --help` has no {name}")),
            Some(true) if !w.contains('=') => {
                rest.next();
            }
            Some(_) => {}
        }
    }
    for w in comment.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if w.len() > 2 && w.starts_with("--") && options.get(w).is_none() {
            return Err(format!(
                "the comment names {w}, which `vramtrace {sub} --help` has not"
            ));
        }
    }
    Ok(Some(sub))
}

#[test]
fn every_command_of_the_readme_and_the_guide_is_one_vramtrace_has() {
    let mut help = Help {
        cache: HashMap::new(),
    };
    let mut errors = Vec::new();
    let mut checked: HashMap<String, usize> = HashMap::new();
    let mut in_readme = 0;
    for (path, text) in pages() {
        let name = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        for (n, line) in sh_lines(&text) {
            match check_line(&line, &mut help) {
                Ok(Some(sub)) => {
                    *checked.entry(sub).or_default() += 1;
                    if name == "README.md" {
                        in_readme += 1;
                    }
                }
                Ok(None) => {}
                Err(e) => errors.push(format!("{name}:{n}: {e}\n    {}", line.trim())),
            }
        }
    }
    assert!(errors.is_empty(), "\n{}", errors.join("\n"));
    // The front page's commands, and most subcommands across the guide, were read.
    assert!(
        in_readme >= 5,
        "only {in_readme} vramtrace commands in README.md"
    );
    for sub in [
        "run",
        "summary",
        "peak",
        "leaks",
        "oom",
        "timeline",
        "report",
        "flamegraph",
        "export",
        "snapshot",
        "whatif",
        "diff",
        "check",
        "pack",
        "completions",
        "man",
    ] {
        assert!(
            checked.contains_key(sub),
            "no `vramtrace {sub}` line in README.md or docs/guide/: {checked:?}"
        );
    }
}

/// The targets of a page's Markdown links that are paths in the repository (not
/// `http:`, `mailto:` or `#anchor`), with any `#anchor` taken off.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        rest = &rest[end..];
        if target.contains("://") || target.starts_with("mailto:") || target.starts_with('#') {
            continue;
        }
        let path = target.split('#').next().unwrap_or(target);
        if !path.is_empty() {
            out.push(path.to_string());
        }
    }
    out
}

#[test]
fn every_link_of_the_readme_and_the_guide_points_at_a_file() {
    let mut broken = Vec::new();
    let mut count = 0;
    for (path, text) in pages() {
        let dir = path.parent().expect("a page has a directory");
        for link in relative_links(&text) {
            count += 1;
            if !dir.join(&link).exists() {
                broken.push(format!("{}: {link}", path.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to no file:\n{}",
        broken.join("\n")
    );
    assert!(count > 20, "only {count} relative links read");
}

#[test]
fn the_readme_links_every_page_of_the_guide() {
    let all = pages();
    let readme = &all[0].1;
    let links = relative_links(readme);
    for (path, _) in &all[1..] {
        let name = format!(
            "docs/guide/{}",
            path.file_name().expect("a file name").to_string_lossy()
        );
        assert!(
            links.contains(&name),
            "README.md does not link {name}: {links:?}"
        );
    }
}

/// Two screens of a 50-line terminal.
const FRONT_PAGE_LINES: usize = 100;

#[test]
fn the_readme_is_a_front_page_of_two_screens() {
    let all = pages();
    let lines = all[0].1.lines().count();
    assert!(
        lines <= FRONT_PAGE_LINES,
        "README.md has {lines} lines, over two screens ({FRONT_PAGE_LINES}): move reference to docs/guide/"
    );
}
