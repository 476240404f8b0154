//! The allocator's settings, in `PYTORCH_CUDA_ALLOC_CONF`'s vocabulary: read from a
//! snapshot's `allocator_settings`, changed by `--set KEY:VALUE`.

use super::sizes::{LARGE_BUFFER, MIB};
use serde_json::{Map, Value};

/// Intervals of `roundup_power2_divisions`: one per power of two from 1 MiB to 32 GiB.
pub const INTERVALS: usize = 16;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Blocks at least this large are "oversize": never split; `u64::MAX` when unset.
    pub max_split_size: u64,
    /// An oversize request may take a cached block at most this much larger (2.5+).
    pub max_non_split_rounding: u64,
    /// Divisions per power-of-two interval, from [1, 2) MiB up; 0 or 1 = plain rounding.
    pub roundup_power2_divisions: [u64; INTERVALS],
    /// Fraction of the allowed memory above which unused cached segments are freed
    /// before a new one is allocated; only with `per_process_memory_fraction`.
    pub garbage_collection_threshold: f64,
    pub expandable_segments: bool,
    /// `torch.cuda.set_per_process_memory_fraction`: the share of the card the
    /// allocator may reserve.
    pub per_process_memory_fraction: Option<f64>,
    /// `backend:cudaMallocAsync`: the driver's pool, which this model does not have.
    pub malloc_async: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_split_size: u64::MAX,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: [0; INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            per_process_memory_fraction: None,
            malloc_async: false,
        }
    }
}

impl Settings {
    /// The settings a snapshot recorded (`allocator_settings`, 2.4+); defaults where absent.
    pub fn from_recorded(recorded: Option<&Map<String, Value>>) -> Result<Settings, String> {
        let mut s = Settings::default();
        let Some(map) = recorded else {
            return Ok(s);
        };
        if let Some(conf) = map.get("PYTORCH_CUDA_ALLOC_CONF").and_then(Value::as_str) {
            if conf.contains("cudaMallocAsync") {
                s.malloc_async = true;
            }
        }
        if let Some(v) = map.get("max_split_size").and_then(Value::as_i64) {
            // The C++ SIZE_MAX reads back as -1.
            s.max_split_size = if v < 0 { u64::MAX } else { v as u64 };
        }
        if let Some(v) = map
            .get("max_non_split_rounding_size")
            .and_then(Value::as_u64)
        {
            s.max_non_split_rounding = v;
        }
        if let Some(v) = map
            .get("garbage_collection_threshold")
            .and_then(Value::as_f64)
        {
            s.garbage_collection_threshold = v;
        }
        if let Some(v) = map.get("expandable_segments").and_then(Value::as_bool) {
            s.expandable_segments = v;
        }
        if let Some(Value::Object(div)) = map.get("roundup_power2_divisions") {
            for (mb, n) in div {
                let mb: u64 = mb.parse().map_err(|_| {
                    format!("allocator_settings: roundup_power2_divisions key {mb:?}")
                })?;
                if let (Some(i), Some(n)) = (interval_of_mib(mb), n.as_u64()) {
                    s.roundup_power2_divisions[i] = n;
                }
            }
        }
        Ok(s)
    }

    /// Applies `KEY:VALUE` or a whole `PYTORCH_CUDA_ALLOC_CONF` string (`K:V,K:V`).
    pub fn set(&mut self, conf: &str) -> Result<(), String> {
        for item in split_conf(conf) {
            let (key, value) = item
                .split_once(':')
                .ok_or_else(|| format!("--set {item:?}: expected KEY:VALUE"))?;
            self.set_one(key.trim(), value.trim())
                .map_err(|e| format!("--set {item}: {e}"))?;
        }
        Ok(())
    }

    fn set_one(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "max_split_size_mb" => {
                let mb: u64 = value.parse().map_err(|_| "not a whole number of MiB")?;
                // PyTorch refuses 20 MiB and less: the large buffer must stay splittable.
                if mb <= LARGE_BUFFER / MIB {
                    return Err(format!("must be more than {}", LARGE_BUFFER / MIB));
                }
                self.max_split_size = mb.saturating_mul(MIB);
            }
            "max_non_split_rounding_mb" => {
                let mb: u64 = value.parse().map_err(|_| "not a whole number of MiB")?;
                self.max_non_split_rounding = mb.saturating_mul(MIB);
            }
            "garbage_collection_threshold" => {
                let t: f64 = value.parse().map_err(|_| "not a number")?;
                if !(t > 0.0 && t < 1.0) {
                    return Err("must be between 0 and 1, exclusive".into());
                }
                self.garbage_collection_threshold = t;
            }
            "per_process_memory_fraction" => {
                let f: f64 = value.parse().map_err(|_| "not a number")?;
                if !(f > 0.0 && f <= 1.0) {
                    return Err("must be in (0, 1]".into());
                }
                self.per_process_memory_fraction = Some(f);
            }
            "expandable_segments" => self.expandable_segments = parse_bool(value)?,
            "backend" => match value {
                "native" => self.malloc_async = false,
                "cudaMallocAsync" => self.malloc_async = true,
                _ => return Err("expected native or cudaMallocAsync".into()),
            },
            "roundup_power2_divisions" => self.set_divisions(value)?,
            // Settings that change no block's address or size.
            "release_lock_on_cudamalloc"
            | "pinned_use_cuda_host_register"
            | "pinned_num_register_threads"
            | "pinned_use_background_threads" => {}
            _ => return Err(format!("unknown key {key:?}")),
        }
        Ok(())
    }

    /// `N` (every interval) or `[MIB:N,...,>:N]` (per interval; `>` the rest).
    fn set_divisions(&mut self, value: &str) -> Result<(), String> {
        let Some(list) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
            let n = parse_divisions(value)?;
            self.roundup_power2_divisions = [n; INTERVALS];
            return Ok(());
        };
        let mut last: Option<usize> = None;
        for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = pair
                .split_once(':')
                .ok_or_else(|| format!("{pair:?}: expected MIB:N"))?;
            let n = parse_divisions(v.trim())?;
            if k.trim() == ">" {
                let from = last.map_or(0, |i| i + 1);
                for d in &mut self.roundup_power2_divisions[from.min(INTERVALS)..] {
                    *d = n;
                }
            } else {
                let mb: u64 = k
                    .trim()
                    .parse()
                    .map_err(|_| format!("{k:?}: not a size in MiB"))?;
                let i = interval_of_mib(mb)
                    .ok_or_else(|| format!("{mb}: not a power of two from 1 to 32768"))?;
                self.roundup_power2_divisions[i] = n;
                last = Some(i);
            }
        }
        Ok(())
    }

    /// The divisions that apply to a request of `size` bytes.
    pub fn divisions_for(&self, size: u64) -> u64 {
        let log = 63 - size.max(1).leading_zeros() as usize;
        let i = log.saturating_sub(20).min(INTERVALS - 1);
        self.roundup_power2_divisions[i]
    }

    /// The settings in `PYTORCH_CUDA_ALLOC_CONF` form, for headings; "defaults" if none.
    pub fn describe(&self) -> String {
        let d = Settings::default();
        let mut parts = Vec::new();
        if self.malloc_async {
            parts.push("backend:cudaMallocAsync".to_string());
        }
        if self.max_split_size != d.max_split_size {
            parts.push(format!("max_split_size_mb:{}", self.max_split_size / MIB));
        }
        if self.max_non_split_rounding != d.max_non_split_rounding {
            parts.push(format!(
                "max_non_split_rounding_mb:{}",
                self.max_non_split_rounding / MIB
            ));
        }
        if self.roundup_power2_divisions != d.roundup_power2_divisions {
            let first = self.roundup_power2_divisions[0];
            if self.roundup_power2_divisions.iter().all(|&n| n == first) {
                parts.push(format!("roundup_power2_divisions:{first}"));
            } else {
                let list: Vec<String> = self
                    .roundup_power2_divisions
                    .iter()
                    .enumerate()
                    .map(|(i, n)| format!("{}:{n}", 1u64 << i))
                    .collect();
                parts.push(format!("roundup_power2_divisions:[{}]", list.join(",")));
            }
        }
        if self.garbage_collection_threshold > 0.0 {
            parts.push(format!(
                "garbage_collection_threshold:{}",
                self.garbage_collection_threshold
            ));
        }
        if self.expandable_segments {
            parts.push("expandable_segments:True".into());
        }
        if let Some(f) = self.per_process_memory_fraction {
            parts.push(format!("per_process_memory_fraction:{f}"));
        }
        if parts.is_empty() {
            "defaults".into()
        } else {
            parts.join(",")
        }
    }
}

/// Splits `K:V,K:[a:b,c:d],K:V` at the commas outside brackets.
fn split_conf(conf: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in conf.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&conf[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&conf[start..]);
    out.into_iter().filter(|s| !s.trim().is_empty()).collect()
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "True" | "true" | "1" => Ok(true),
        "False" | "false" | "0" => Ok(false),
        _ => Err("expected True or False".into()),
    }
}

fn parse_divisions(v: &str) -> Result<u64, String> {
    let n: u64 = v.parse().map_err(|_| format!("{v:?}: not a number"))?;
    if n != 0 && !n.is_power_of_two() {
        return Err(format!("{n}: divisions must be a power of two"));
    }
    Ok(n)
}

/// The interval index of a boundary given in MiB (1, 2, 4, ... 32768).
fn interval_of_mib(mb: u64) -> Option<usize> {
    if !mb.is_power_of_two() {
        return None;
    }
    let i = mb.trailing_zeros() as usize;
    (i < INTERVALS).then_some(i)
}
