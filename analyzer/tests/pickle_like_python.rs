//! Pickles read, or refused, exactly where Python's own `pickle.loads` reads or refuses
//! them, to the same values: protocol 0's integer literals (as an INT, a LONG and a memo
//! index), and dict keys Python cannot hash.

use vramtrace_analyzer::snapshot::pickle::{self, Object, Value};

mod common;

/// What Python's `pickle.loads` makes of each pickle (hex on the command line): the
/// value it gives (an integer, True or False; a list's or dict's length), or null where it
/// raises.
const PYTHON: &str = r#"
import json, pickle, sys
out = []
for h in sys.argv[1:]:
    try:
        v = pickle.loads(bytes.fromhex(h))
        out.append(str(len(v) if isinstance(v, (list, dict)) else v))
    except Exception:
        out.append(None)
print(json.dumps(out))
"#;

/// Literals Python's `int()` reads or refuses, within 128 bits (past them this reader
/// refuses what Python reads: no snapshot holds such a number).
const LITERALS: &[&str] = &[
    "0",
    "\x0b5",
    "5\x0b",
    "\x0c1",
    "-0",
    "+1",
    " 1",
    "\r0",
    "1\0",
    "\0",
    "\0f",
    "12\0zz",
    "-01000000000000000000000",
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
        Value::Bool(b) => if b { "True" } else { "False" }.to_string(),
        Value::BigInt(id) => match &p.objects[id] {
            Object::BigInt(i) => i.to_string(),
            _ => unreachable!("a big integer's object"),
        },
        Value::List(id) => match &p.objects[id] {
            Object::Seq(items) => items.len().to_string(),
            _ => unreachable!("a list's object"),
        },
        Value::Dict(id) => match &p.objects[id] {
            Object::Dict(pairs) => pairs.len().to_string(),
            _ => unreachable!("a dict's object"),
        },
        other => panic!("{other:?}"),
    })
}

/// `cases`, each read here and by Python: the same number, or both refuse it.
fn compare_with_python(cases: &[(String, Vec<u8>)]) {
    let mut args = vec!["-c".to_string(), PYTHON.to_string()];
    args.extend(cases.iter().map(|(_, b)| hex(b)));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let python: Vec<Option<String>> = serde_json::from_str(&common::python3(&args)).unwrap();
    assert_eq!(python.len(), cases.len());
    let read = python.iter().filter(|p| p.is_some()).count();
    // Both kinds are among the cases: the comparison can fail either way.
    assert!(read > 0 && read < cases.len(), "{read} read");
    for ((what, bytes), expected) in cases.iter().zip(&python) {
        assert_eq!(&ours(bytes), expected, "{what}");
    }
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
    compare_with_python(&cases);
}

#[test]
fn dict_keys_python_cannot_hash_are_refused_as_python_refuses_them() {
    // Protocol 2 opcodes before STOP: K is a small int, ] [] , } {}, ) (), ( a MARK,
    // \x85/\x86 a tuple of 1/2, u SETITEMS, s SETITEM, d DICT, \x91 FROZENSET.
    let bodies: &[(&str, &[u8])] = &[
        ("int key", b"}(K\x01K\x02u"),
        ("list key", b"}(]K\x02u"),
        ("dict key", b"}(}K\x02u"),
        ("list key by SETITEM", b"}]K\x02s"),
        ("list key by DICT", b"(]K\x02d"),
        ("tuple key", b"}(K\x01K\x02\x86K\x03u"),
        ("tuple holding a list", b"}(K\x01]\x86K\x03u"),
        ("tuple in a tuple holding a dict", b"}(}\x85\x85K\x03u"),
        ("empty tuple key", b"}()K\x03u"),
        ("frozenset key", b"}((K\x01\x91K\x03u"),
        ("a dict keyed by itself", b"}q\x00(h\x00K\x01u"),
        ("list value", b"}(K\x01]u"),
    ];
    let cases: Vec<(String, Vec<u8>)> = bodies
        .iter()
        .map(|(what, body)| (what.to_string(), [b"\x80\x02", *body, b"."].concat()))
        .collect();
    compare_with_python(&cases);
}
