//! A bounded version of the `snapshot_reader` fuzz target for the normal test suite: 400
//! mutants of a real snapshot (bytes changed, removed and cut), each read to the model
//! and streamed as the views read it. None may panic; each reads or gives an error.

mod common;

use std::path::{Path, PathBuf};
use vramtrace_analyzer::snapshot::events::SnapshotEvents;
use vramtrace_analyzer::snapshot::{parse_snapshot, pickle};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/torch-snapshots/silmont_mem_snapshot.pickle")
}

/// A small deterministic generator (xorshift), so that a failure names a mutant that
/// can be made again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutant(data: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut m = data.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(3) {
            0 => {
                let i = rng.below(m.len());
                m[i] = rng.next() as u8;
            }
            1 => {
                let i = rng.below(m.len());
                m.remove(i);
            }
            _ => m.truncate(1 + rng.below(m.len())),
        }
    }
    m
}

#[test]
fn mutants_of_a_real_snapshot_read_or_fail_without_panicking() {
    if common::fixtures().is_none() {
        return;
    }
    let data = std::fs::read(fixture()).unwrap();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let (mut read, mut streamed) = (0, 0);
    for i in 0..400 {
        let m = mutant(&data, &mut rng);
        read += parse_snapshot(&m).is_ok() as u32;
        let Ok(p) = pickle::parse(&m) else { continue };
        let path = Path::new("mutant.pickle");
        if let Ok(mut events) = SnapshotEvents::from_pickle(path, p, false) {
            streamed += 1;
            let mut n = 0u64;
            while events.next_event().is_some() {
                n += 1;
                assert!(n < 1_000_000, "mutant {i}: events out of proportion");
            }
        }
    }
    // Some mutants change only a value: the readers must have been exercised past the
    // first error.
    assert!(read > 0 && streamed > 0, "read {read}, streamed {streamed}");
}

/// Each real snapshot, and mutants of each, decodes to the same objects with history
/// entries read in one step (in memory, and from a stream read ahead on a thread) as
/// opcode by opcode (the reading Python's `pickle` checks in the other tests), or fails
/// at the same byte for the same reason.
#[test]
fn entries_read_in_one_step_decode_as_opcode_by_opcode() {
    if common::fixtures().is_none() {
        return;
    }
    let dir = fixture().parent().unwrap().to_path_buf();
    let mut rng = Rng(0x0b5e_55ed_0dd5_1234);
    let (mut compared, mut fast) = (0, 0);
    for f in std::fs::read_dir(&dir).unwrap() {
        let path = f.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        for i in 0..60 {
            let m = if i == 0 {
                data.clone()
            } else {
                mutant(&data, &mut rng)
            };
            // The decoded objects, with how many entries were read in one step apart.
            let decoded = |p: Result<pickle::Pickle, pickle::PickleError>| match p {
                Ok(mut p) => (std::mem::take(&mut p.entries_in_one_step), format!("{p:?}")),
                Err(e) => (0, format!("{e:?}")),
            };
            let (in_one_step, one_step) = decoded(pickle::parse(&m));
            let (none, by_opcode) = decoded(pickle::parse_opcode_by_opcode(&m));
            // Read ahead on a thread, as files are.
            let (ahead_in_one_step, ahead) = decoded(pickle::parse_reader(&mut m.as_slice()));
            assert!(
                one_step == by_opcode && ahead == by_opcode,
                "{}: mutant {i} decodes differently",
                path.display()
            );
            assert_eq!(none, 0);
            if i == 0 {
                // Read ahead, as in memory: the same entries in one step.
                assert_eq!(ahead_in_one_step, in_one_step, "{}", path.display());
                compared += one_step.matches("Entry(").count();
                fast += in_one_step;
            }
        }
    }
    // Both paths keep history entries compact: the comparison covered them. An entry
    // with a new frame list, or the first of its shape, goes opcode by opcode; 40% of the
    // real entries are neither (29,963 of 73,788 in the eleven fixtures).
    assert!(compared > 5_000, "{compared} entries");
    assert!(
        fast * 4 >= compared,
        "{fast} of {compared} entries in one step"
    );
}
