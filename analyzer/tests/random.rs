//! Random alloc/free/fail sequences across processes, threads and devices (seeded,
//! bounded): the peaks, leaks and timeline vramtrace reports match a deliberately simple
//! recomputation written here, from the same generated calls.

mod common;
use common::*;
use std::collections::{BTreeMap, HashMap};

/// xorshift64*: enough randomness for test inputs, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const PROCESSES: usize = 3;
const DEVICES: i32 = 2;
const STEPS: usize = 3000;
const RESOLUTION: u64 = 50 * 1000; // 50 us

/// One generated memory change: run time, process, device, signed bytes.
struct Change {
    time: u64,
    process: usize,
    dev: i32,
    delta: i64,
}

fn check_seed(seed: u64) {
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    // Process p starts at run time p * 7 us; all on one host, so monotonic origins line up.
    let origin = |p: usize| p as u64 * 7_000;
    let mut lines: Vec<Vec<String>> = (0..PROCESSES)
        .map(|p| {
            vec![header(
                1000 + p as u32,
                "h",
                5 * S + origin(p),
                1_600_000_000 * S + origin(p),
                None,
            )]
        })
        .collect();
    let mut live: Vec<HashMap<u64, (i32, u64)>> = vec![HashMap::new(); PROCESSES];
    let mut changes = Vec::new();
    let mut time = 20_000;
    for _ in 0..STEPS {
        time += 1 + rng.below(400);
        let p = rng.below(PROCESSES as u64) as usize;
        let t = time - origin(p);
        let tid = 1 + rng.below(3) as u32;
        let dev = rng.below(DEVICES as u64) as i32;
        let set_tid = |mut s: String| {
            s = s.replace("\"tid\":7", &format!("\"tid\":{tid}"));
            s
        };
        match rng.below(10) {
            0..=4 => {
                // Addresses from a small pool, so the driver "reuses" freed ones.
                let addr = 0x1000 * (1 + rng.below(64));
                if live[p].contains_key(&addr) {
                    continue;
                }
                let size = 256 * (1 + rng.below(4096));
                live[p].insert(addr, (dev, size));
                lines[p].push(set_tid(alloc(t, dev, "cudaMalloc", addr, size)));
                changes.push(Change {
                    time,
                    process: p,
                    dev,
                    delta: size as i64,
                });
            }
            5..=7 => {
                let mut addrs: Vec<u64> = live[p].keys().copied().collect();
                if addrs.is_empty() {
                    continue;
                }
                addrs.sort_unstable();
                let addr = addrs[rng.below(addrs.len() as u64) as usize];
                let (d, size) = live[p].remove(&addr).unwrap();
                lines[p].push(set_tid(free(t, d, "cudaFree", addr)));
                changes.push(Change {
                    time,
                    process: p,
                    dev: d,
                    delta: -(size as i64),
                });
            }
            8 => lines[p].push(set_tid(failed(t, dev, "cudaMalloc", GIB))),
            // A free of an address never allocated: reported as unknown, changes nothing.
            _ => lines[p].push(set_tid(free(t, dev, "cudaFree", 0xdead_0000))),
        }
    }
    for (p, l) in lines.iter().enumerate() {
        write_trace(dir.path(), &format!("p{p}.jsonl"), l);
    }
    let path = dir.path().to_str().unwrap();

    // The simple recomputation: running sums per (process, device) and per device.
    let mut per_process: BTreeMap<(usize, i32), (i64, i64, u64)> = BTreeMap::new(); // now, peak, time
    let mut per_gpu: BTreeMap<i32, (i64, i64, u64)> = BTreeMap::new();
    let mut history: BTreeMap<i32, Vec<(u64, i64)>> = BTreeMap::new();
    for c in &changes {
        let e = per_process.entry((c.process, c.dev)).or_default();
        e.0 += c.delta;
        if e.0 > e.1 {
            e.1 = e.0;
            e.2 = c.time;
        }
        let g = per_gpu.entry(c.dev).or_default();
        g.0 += c.delta;
        if g.0 > g.1 {
            g.1 = g.0;
            g.2 = c.time;
        }
        history.entry(c.dev).or_default().push((c.time, g.0));
    }

    let (s, code, err) = json_view(&["summary", "--json", path]);
    assert_eq!(code, Some(0), "{err}");
    for (dev, (now, peak, t)) in &per_gpu {
        let d = s["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["gpu"].as_str() == Some(dev.to_string().as_str()))
            .unwrap();
        assert_eq!(
            d["peak_reserved_bytes"].as_i64(),
            Some(*peak),
            "seed {seed} GPU {dev} peak"
        );
        assert_eq!(
            d["peak_time_ns"].as_u64(),
            Some(*t),
            "seed {seed} GPU {dev} peak time"
        );
        assert_eq!(
            d["reserved_bytes_at_end"].as_i64(),
            Some(*now),
            "seed {seed} GPU {dev} end"
        );
    }
    for ((p, dev), (now, peak, t)) in &per_process {
        let proc_ = &s["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["pid"] == 1000 + *p as u64)
            .unwrap();
        let d = proc_["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["device"] == *dev)
            .unwrap();
        assert_eq!(
            d["peak_reserved_bytes"].as_i64(),
            Some(*peak),
            "seed {seed} p{p} dev {dev}"
        );
        assert_eq!(
            d["peak_time_ns"].as_u64(),
            Some(*t),
            "seed {seed} p{p} dev {dev} time"
        );
        assert_eq!(d["reserved_bytes_at_end"].as_i64(), Some(*now));
    }

    let (l, _, _) = json_view(&["leaks", "--json", path]);
    let leaked: u64 = live.iter().flat_map(|m| m.values()).map(|v| v.1).sum();
    let blocks: usize = live.iter().map(|m| m.len()).sum();
    assert_eq!(
        l["leaked_bytes"].as_u64(),
        Some(leaked),
        "seed {seed} leaks"
    );
    assert_eq!(l["leaked_blocks"].as_u64(), Some(blocks as u64));

    let (tl, _, _) = json_view(&["timeline", "--json", "--resolution", "50us", path]);
    assert_eq!(tl["resolution_ns"], RESOLUTION);
    for (dev, h) in &history {
        let series = tl["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["scope"] == "run" && x["gpu"].as_str() == Some(dev.to_string().as_str()))
            .unwrap();
        let points = series["points"].as_array().unwrap();
        for (b, point) in points.iter().enumerate() {
            let (lo, hi) = (b as u64 * RESOLUTION, (b as u64 + 1) * RESOLUTION);
            let before = h.iter().take_while(|c| c.0 < lo).last().map_or(0, |c| c.1);
            let inside: Vec<i64> = h
                .iter()
                .filter(|c| c.0 >= lo && c.0 < hi)
                .map(|c| c.1)
                .collect();
            let max = inside.iter().copied().fold(before, i64::max);
            let end = inside.last().copied().unwrap_or(before);
            assert_eq!(
                point["max_bytes"].as_i64(),
                Some(max),
                "seed {seed} GPU {dev} bucket {b} max"
            );
            assert_eq!(
                point["live_bytes"].as_i64(),
                Some(end),
                "seed {seed} GPU {dev} bucket {b} end"
            );
        }
        let last = h.last().unwrap().0;
        assert!(
            points.len() as u64 > last / RESOLUTION,
            "timeline reaches the last change"
        );
    }
}

#[test]
fn random_runs_match_a_simple_recomputation() {
    for seed in [1, 2, 3, 0x5eed, 0xdecade] {
        check_seed(seed);
    }
}
