//! The analyzer's arrows run one way: inputs and the model (replay/, snapshot/, model/,
//! allocator/, whatif/, pack/ and the small modules beside them) -> views/ -> render/ ->
//! cmd/. A file that names a layer above its own fails this test with the line.

use std::path::{Path, PathBuf};

/// Each layer, lowest first, by the top-level names under analyzer/src it holds.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "inputs and the model",
        &[
            "replay",
            "snapshot",
            "model",
            "allocator",
            "whatif",
            "pack",
            "input.rs",
            "run_id.rs",
            "frame_options.rs",
            "regular_file.rs",
            "units.rs",
            "errors.rs",
            "output_file.rs",
        ],
    ),
    ("views", &["views"]),
    ("render", &["render"]),
    ("cmd", &["cmd", "main.rs", "lib.rs"]),
];

fn rust_files(at: &Path, out: &mut Vec<PathBuf>) {
    if at.is_dir() {
        for e in std::fs::read_dir(at).unwrap() {
            rust_files(&e.unwrap().path(), out);
        }
    } else if at.extension().is_some_and(|x| x == "rs") {
        out.push(at.to_path_buf());
    }
}

#[test]
fn no_module_names_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut seen = 0;
    let mut wrong = Vec::new();
    for (i, (_, names)) in LAYERS.iter().enumerate() {
        let above: Vec<&str> = LAYERS[i + 1..]
            .iter()
            .flat_map(|(_, n)| n.iter())
            .filter(|n| !n.ends_with(".rs"))
            .copied()
            .collect();
        for name in *names {
            let mut files = Vec::new();
            rust_files(&src.join(name), &mut files);
            assert!(!files.is_empty(), "analyzer/src/{name} holds no Rust file");
            for file in files {
                seen += 1;
                let text = std::fs::read_to_string(&file).unwrap();
                for (n, line) in text.lines().enumerate() {
                    if line.trim_start().starts_with("//") {
                        continue;
                    }
                    for up in &above {
                        if line.contains(&format!("crate::{up}::"))
                            || line.contains(&format!("crate::{up}}}"))
                            || line.contains(&format!("crate::{up};"))
                        {
                            let rel = file.strip_prefix(&src).unwrap_or(&file);
                            wrong.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
                        }
                    }
                }
            }
        }
    }
    // Every file of src/ belongs to a layer.
    let mut all = Vec::new();
    rust_files(&src, &mut all);
    assert_eq!(
        seen,
        all.len(),
        "a file of analyzer/src is in no layer of LAYERS"
    );
    assert!(
        wrong.is_empty(),
        "arrows that run upward:\n{}",
        wrong.join("\n")
    );
}
