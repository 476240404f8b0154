//! Protocol 0's text arguments read as Python's own `pickle` reads them: each integer
//! literal, as an INT, a LONG and a memo index, is read to the same number, or refused,
//! exactly where `pickle.loads` reads or refuses it.

use vramtrace_analyzer::snapshot::pickle::{self, Object, Value};

mod common;

/// What Python's `pickle.loads` makes of each pickle (hex on the command line): the
/// integer it gives (a list's length), or null where it raises.
const PYTHON: &str = r#"
import json, pickle, sys
out = []
for h in sys.argv[1:]:
    try:
        v = pickle.loads(bytes.fromhex(h))
        out.append(str(len(v) if isinstance(v, list) else int(v)))
    except Exception:
        out.append(None)
print(json.dumps(out))
"#;

/// Literals Python's `int()` reads or refuses, within 128 bits (past them this reader
/// refuses what Python reads: no snapshot holds such a number).
const LITERALS: &[&str] = &[
    "0",
    "00",
    "01",
    "000",
    "007",
    "010",
    "-010",
    " 010",
    "010 ",
    "08",
    "0009",
    "10",
    "+5",
    "-5",
    " 5 ",
    "\t7",
    "1_000",
    "1__0",
    "_1",
    "1_",
    "0_0",
    "0_7",
    "0x1f",
    "0X_1F",
    "0x",
    "0x_",
    "-0x10",
    "0o17",
    "0O8",
    "0b101",
    "0b2",
    "1 2",
    "",
    "-",
    "1e3",
    "\u{663}",
    "170141183460469231731687303715884105727",
    "-170141183460469231731687303715884105728",
];

fn hex(b: &[u8]) -> String {
    b.iter().map(|c| format!("{c:02x}")).collect()
}

/// What this reader makes of `bytes`, as the Python side prints it.
fn ours(bytes: &[u8]) -> Option<String> {
    let p = pickle::parse(bytes).ok()?;
    Some(match p.root {
        Value::Int(i) => i.to_string(),
        Value::Bool(b) => (b as u8).to_string(),
        Value::BigInt(id) => match &p.objects[id] {
            Object::BigInt(i) => i.to_string(),
            _ => unreachable!("a big integer's object"),
        },
        Value::List(id) => match &p.objects[id] {
            Object::Seq(items) => items.len().to_string(),
            _ => unreachable!("a list's object"),
        },
        other => panic!("{other:?}"),
    })
}

#[test]
fn integers_and_memo_indices_read_as_pythons_pickle_reads_them() {
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for lit in LITERALS {
        let l = lit.as_bytes();
        cases.push((format!("INT {lit:?}"), [b"I", l, b"\n."].concat()));
        cases.push((format!("LONG {lit:?}"), [b"L", l, b"L\n."].concat()));
        // A list put at the index, an item appended, and got back by it.
        let memo = [b"(lp", l, b"\nI1\na0g", l, b"\n."].concat();
        cases.push((format!("memo index {lit:?}"), memo));
    }
    let mut args = vec!["-c".to_string(), PYTHON.to_string()];
    args.extend(cases.iter().map(|(_, b)| hex(b)));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let python: Vec<Option<String>> = serde_json::from_str(&common::python3(&args)).unwrap();
    assert_eq!(python.len(), cases.len());
    let read = python.iter().filter(|p| p.is_some()).count();
    // Both kinds are among the cases: the comparison can fail either way.
    assert!(read > 20 && read < cases.len() - 20, "{read} read");
    for ((what, bytes), expected) in cases.iter().zip(&python) {
        assert_eq!(&ours(bytes), expected, "{what}");
    }
}
