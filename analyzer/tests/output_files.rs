//! Every file vramtrace writes is created private (0600, even under umask 0), never
//! through a planted symbolic link, and never over an existing file without `--force`.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

/// A run to write outputs of (1 GiB allocated, never freed), in `traces/` of the
/// directory returned.
fn traces() -> (tempfile::TempDir, String) {
    let (dir, traces) = one_trace_dir(
        "vramtrace-h-10.jsonl",
        &[
            header(10, "h", S, 1_700_000_000 * S, None),
            alloc(10 * MS, 0, "cudaMalloc", 0x1000, GIB),
            end(20 * MS, 1),
        ],
    );
    (dir, traces.to_str().unwrap().to_string())
}

/// Each command that writes a file, with `FILE` where the file goes.
const WRITERS: &[&[&str]] = &[
    &["report", "-o", "FILE"],
    &["export", "--format", "perfetto", "-o", "FILE"],
    &["export", "--format", "csv", "-o", "FILE"],
    &["export", "--format", "memory-viz", "-o", "FILE"],
    &["timeline", "--svg", "FILE"],
    &["flamegraph", "-o", "FILE"],
    &["flamegraph", "--folded", "-o", "FILE"],
];

/// `vramtrace ARGS... TRACES` with `FILE` replaced by `file`, under umask 0.
fn write_to(args: &[&str], file: &Path, traces: &str, extra: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramtrace"));
    cmd.args(args.iter().map(|a| {
        if *a == "FILE" {
            file.to_str().unwrap()
        } else {
            a
        }
    }))
    .args(extra)
    .arg(traces);
    // SAFETY: umask is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    cmd.output().unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn outputs_are_private_whatever_the_umask() {
    let (dir, t) = traces();
    for (i, args) in WRITERS.iter().enumerate() {
        let file = dir.path().join(format!("out-{i}"));
        let out = write_to(args, &file, &t, &[]);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert_eq!(mode(&file), 0o600, "{args:?}");
        assert!(std::fs::metadata(&file).unwrap().len() > 0, "{args:?}");
    }
}

#[test]
fn an_existing_file_is_kept_unless_forced() {
    let (dir, t) = traces();
    for (i, args) in WRITERS.iter().enumerate() {
        let file = dir.path().join(format!("out-{i}"));
        std::fs::write(&file, "keep me\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = write_to(args, &file, &t, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{}: already exists", file.display())),
            "{args:?}: {stderr}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me\n");
        let out = write_to(args, &file, &t, &["--force"]);
        assert!(out.status.success(), "{args:?} --force: {out:?}");
        assert_ne!(
            std::fs::read_to_string(&file).unwrap_or_default(),
            "keep me\n"
        );
        assert_eq!(mode(&file), 0o600, "{args:?} --force: a new file");
    }
}

/// A link planted where the output goes (to a file someone wants overwritten, or to a
/// name that does not exist yet) is not followed, with `--force` or without.
#[test]
fn a_planted_symlink_is_not_followed() {
    let (dir, t) = traces();
    let victim = dir.path().join("authorized_keys");
    for (i, args) in WRITERS.iter().enumerate() {
        let link = dir.path().join(format!("out-{i}"));
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for extra in [&[][..], &["--force"][..]] {
            let out = write_to(args, &link, &t, extra);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?} {extra:?}: {stderr}");
            assert!(stderr.contains("symbolic link"), "{args:?}: {stderr}");
            assert!(
                !victim.exists(),
                "{args:?} {extra:?} wrote through the link"
            );
            assert!(std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink());
        }
    }
}

/// The Python hook's file, in its private directory, is private too.
#[test]
fn the_python_hook_is_private() {
    let hook = vramtrace_analyzer::cmd::python_hook::write_hook().unwrap();
    assert_eq!(mode(&hook.dir), 0o700);
    assert_eq!(mode(&hook.dir.join("sitecustomize.py")), 0o600);
}

/// A taken name fails at once, before the traces are read (a long load is not wasted):
/// with traces that do not exist, the error is about the output.
#[test]
fn a_taken_name_fails_before_the_traces_are_read() {
    let (dir, _) = traces();
    let missing = dir.path().join("no-such-traces");
    for (i, args) in WRITERS.iter().enumerate() {
        let file = dir.path().join(format!("out-{i}"));
        std::fs::write(&file, "keep me\n").unwrap();
        let out = write_to(args, &file, missing.to_str().unwrap(), &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("already exists") && !stderr.contains("no-such-traces"),
            "{args:?}: {stderr}"
        );
    }
}
