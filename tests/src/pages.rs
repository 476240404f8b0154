//! The README and the user guide (docs/guide/) as the tests read them: their pages, and
//! the shell lines of their `sh` blocks.

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// README.md and every page of docs/guide/, with their text.
pub fn pages() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    let guide = root().join("docs/guide");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&guide)
        .unwrap_or_else(|e| panic!("{}: {e}", guide.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    assert!(!pages.is_empty(), "no pages in {}", guide.display());
    paths.extend(pages);
    paths
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

/// The lines of a page's ```sh blocks, with their line numbers, lines continued with `\`
/// joined.
pub fn sh_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        if fence.starts_with("```") {
            in_sh = !in_sh && fence.trim_start_matches('`').trim() == "sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        match line.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                joined.push(' ');
                pending = Some((start, joined));
            }
            None => {
                joined.push_str(line);
                out.push((start, joined));
            }
        }
    }
    out
}
