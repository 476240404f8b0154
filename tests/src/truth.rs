//! Ground truth as the workloads print it (`VRAMTRACE_TRUTH {json}` on stdout, when
//! [`ENV`] is set), written by Rust workloads and read by the tests.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

pub const PREFIX: &str = "VRAMTRACE_TRUTH ";

/// Set (to `1`) by the tests, for which the truth is meant: without it, workloads print
/// none, so that the demo's user sees only what the program says (tests/workloads/truth.h).
pub const ENV: &str = "WORKLOAD_TRUTH";

/// Calls made by one single-threaded workload, counted by the workload itself.
pub struct Truth {
    workload: String,
    calls: BTreeMap<(String, String), (u64, u64, u64)>,
    live: BTreeMap<i32, u64>,
    peak: BTreeMap<i32, u64>,
    extra: Map<String, Value>,
}

impl Truth {
    pub fn new(workload: &str) -> Truth {
        Truth {
            workload: workload.into(),
            calls: BTreeMap::new(),
            live: BTreeMap::new(),
            peak: BTreeMap::new(),
            extra: Map::new(),
        }
    }

    fn call(&mut self, api: &str, op: &str, bytes: u64) {
        let c = self.calls.entry((api.into(), op.into())).or_default();
        c.0 += 1;
        c.2 += bytes;
    }

    pub fn alloc(&mut self, api: &str, dev: i32, bytes: u64) {
        self.call(api, "alloc", bytes);
        let live = self.live.entry(dev).or_default();
        *live += bytes;
        let peak = self.peak.entry(dev).or_default();
        *peak = (*peak).max(*live);
    }

    pub fn free(&mut self, api: &str, dev: i32, bytes: u64) {
        self.call(api, "free", 0);
        let live = self.live.entry(dev).or_default();
        *live -= bytes;
    }

    pub fn set(&mut self, key: &str, value: Value) {
        self.extra.insert(key.into(), value);
    }

    pub fn print(&self) {
        if std::env::var_os(ENV).is_none_or(|v| v.is_empty() || v == "0") {
            return;
        }
        let calls: Vec<Value> = self
            .calls
            .iter()
            .map(|((api, op), (count, failed, bytes))| {
                json!({"api": api, "op": op, "count": count, "failed": failed, "bytes": bytes})
            })
            .collect();
        let per_dev = |m: &BTreeMap<i32, u64>| -> Value {
            Value::Object(m.iter().map(|(d, b)| (d.to_string(), json!(b))).collect())
        };
        let mut out = json!({
            "workload": self.workload,
            "pid": std::process::id(),
            // SAFETY: getppid has no preconditions.
            "ppid": unsafe { libc::getppid() },
            "calls": calls,
            "peak_live_bytes": per_dev(&self.peak),
            "peak_live_bytes_upper": per_dev(&self.peak),
            "live_bytes_at_end": per_dev(&self.live),
            "meminfo": [],
            "threads": 1,
        });
        if let Value::Object(o) = &mut out {
            o.extend(self.extra.clone());
        }
        println!("{PREFIX}{out}");
    }
}
