//! `pack --redact`: what a trace says about the machine and the person, taken out before
//! it is shared. Changed: the command line (only the program's name stays), the paths of
//! the executable, of the output pattern and of every frame's module and source file (only
//! file names stay), and host names (`host-1`, `host-2`, ... in order of appearance;
//! also where file names and `torch-*.json` carry them). Kept: sizes, times, addresses, function
//! names and line numbers, the listed environment variables (ranks, devices, allocator
//! settings). A PyTorch snapshot is read and written again with only the file name of
//! each frame's path (see [`snapshot`]).

use serde_json::Value;

#[derive(Default)]
pub struct Redactor {
    /// Host names seen, and the name each gets.
    hosts: Vec<(String, String)>,
}

/// The last component of a path: `/home/ada/train.py` -> `train.py`.
fn base(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

impl Redactor {
    /// Registers a host name; returns the name it is given.
    pub fn host(&mut self, host: &str) -> String {
        if let Some((_, to)) = self.hosts.iter().find(|(from, _)| from == host) {
            return to.clone();
        }
        let to = format!("host-{}", self.hosts.len() + 1);
        self.hosts.push((host.to_string(), to.clone()));
        to
    }

    /// A file name with a host part (`vramtrace-HOST-PID.jsonl`, `torch-HOST-PID.json`)
    /// renamed; only a whole `-HOST-` part is replaced (a short host name is a substring
    /// of many words).
    pub fn file_name(&self, name: &str) -> String {
        let mut out = name.to_string();
        for (from, to) in self.hosts.iter().filter(|(h, _)| !h.is_empty()) {
            out = out.replace(&format!("-{from}-"), &format!("-{to}-"));
        }
        out
    }

    /// A JSON document with every string that is exactly a registered host name, or a
    /// file name with one, replaced; anything that is not JSON is returned as it was.
    pub fn json(&self, content: &[u8]) -> Vec<u8> {
        let Ok(mut v) = serde_json::from_slice::<Value>(content) else {
            return content.to_vec();
        };
        self.hosts_in_value(&mut v);
        let mut out = serde_json::to_vec_pretty(&v).unwrap_or_else(|_| content.to_vec());
        out.push(b'\n');
        out
    }

    fn hosts_in_value(&self, v: &mut Value) {
        match v {
            Value::String(s) => {
                if let Some((_, to)) = self.hosts.iter().find(|(h, _)| h == s) {
                    *s = to.clone();
                } else {
                    // The hook's snapshot names (`torch-snapshot-HOST-PID.pickle`).
                    *s = self.file_name(s);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| self.hosts_in_value(v)),
            Value::Object(o) => o.values_mut().for_each(|v| self.hosts_in_value(v)),
            _ => {}
        }
    }

    /// A trace with its header and frame records redacted; other lines unchanged.
    pub fn trace(&mut self, content: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(content.len());
        for (i, line) in content.split_inclusive(|&b| b == b'\n').enumerate() {
            let redacted = if i == 0 {
                self.header(line)
            } else if line.starts_with(b"{\"frame\":") {
                frame(line)
            } else {
                None
            };
            match redacted {
                Some(v) => {
                    out.extend_from_slice(v.to_string().as_bytes());
                    out.push(b'\n');
                }
                None => out.extend_from_slice(line),
            }
        }
        out
    }

    fn header(&mut self, line: &[u8]) -> Option<Value> {
        let mut v: Value = serde_json::from_slice(line).ok()?;
        let o = v.as_object_mut()?;
        if let Some(host) = o.get("host").and_then(Value::as_str).map(str::to_string) {
            o.insert("host".into(), Value::String(self.host(&host)));
        }
        if let Some(argv) = o.get("argv").and_then(Value::as_array).cloned() {
            let mut kept: Vec<Value> = argv
                .first()
                .and_then(Value::as_str)
                .map(|a| Value::String(base(a)))
                .into_iter()
                .collect();
            if argv.len() > 1 {
                kept.push(Value::String(format!(
                    "[{} arguments removed]",
                    argv.len() - 1
                )));
            }
            o.insert("argv".into(), Value::Array(kept));
        }
        if let Some(exe) = o.get("exe").and_then(Value::as_str).map(base) {
            o.insert("exe".into(), Value::String(exe));
        }
        if let Some(settings) = o.get_mut("settings").and_then(Value::as_object_mut) {
            if let Some(output) = settings.get("output").and_then(Value::as_str).map(base) {
                settings.insert("output".into(), Value::String(output));
            }
        }
        Some(v)
    }
}

/// Keeps only the file name of each path under `keys`.
fn shorten(record: &mut serde_json::Map<String, Value>, keys: &[&str]) {
    for key in keys {
        if let Some(p) = record.get(*key).and_then(Value::as_str).map(base) {
            record.insert(key.to_string(), Value::String(p));
        }
    }
}

fn frame(line: &[u8]) -> Option<Value> {
    let mut v: Value = serde_json::from_slice(line).ok()?;
    let f = v.get_mut("frame")?.as_object_mut()?;
    shorten(f, &["module", "file"]);
    // Calls inlined at the address carry source paths of their own.
    if let Some(calls) = f.get_mut("inlined").and_then(Value::as_array_mut) {
        for call in calls.iter_mut().filter_map(Value::as_object_mut) {
            shorten(call, &["file"]);
        }
    }
    Some(v)
}

/// A PyTorch snapshot with every frame's path cut to its file name (segments', blocks'
/// and the history's frames), written again as `vramtrace` writes snapshots: segments,
/// blocks, history and allocator settings, which every view reads. What it does not write
/// is left out: entries' free-form `user_metadata` and `compile_context` (they can hold
/// anything) and the host allocator's segments. Function names and line numbers stay.
pub fn snapshot(content: &[u8]) -> Result<Vec<u8>, String> {
    let mut snap = crate::snapshot::parse_snapshot(content)?;
    let shorten = |frames: &mut Vec<crate::snapshot::Frame>| {
        for f in frames.iter_mut() {
            if f.filename.contains('/') {
                f.filename = base(&f.filename).into();
            }
        }
    };
    for d in &mut snap.devices {
        for seg in &mut d.segments {
            shorten(&mut seg.frames);
            for b in &mut seg.blocks {
                shorten(&mut b.frames);
            }
        }
        for e in &mut d.trace {
            shorten(&mut e.frames);
            e.extra.clear();
        }
    }
    snap.host_segments.clear();
    snap.host_traces.clear();
    Ok(crate::snapshot::write::memory_viz_bytes(&snap))
}
