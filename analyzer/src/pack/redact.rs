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
pub fn base(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// A command line as redacted: the program's file name, and how many arguments followed.
pub fn command<S: AsRef<str>>(argv: &[S]) -> Vec<String> {
    let mut kept: Vec<String> = argv.first().map(|a| base(a.as_ref())).into_iter().collect();
    if argv.len() > 1 {
        kept.push(format!("[{} arguments removed]", argv.len() - 1));
    }
    kept
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
            let argv: Vec<&str> = argv.iter().map(|a| a.as_str().unwrap_or("")).collect();
            let kept = command(&argv).into_iter().map(Value::String).collect();
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

/// A snapshot frame's file as `pack --redact` keeps it: a library's path from its
/// library part on (`/site-packages/torch/optim/adam.py`: no user or machine in it, and
/// the views still tell it from the user's code), any other path its file name alone
/// (`/` or `\\` separated), a `<...>` name (`<frozen runpy>`, `<string>`) as it is unless a
/// path is in it.
fn snapshot_file(path: &str) -> String {
    if let Some(at) = crate::snapshot::frames::LIBRARY
        .iter()
        .filter_map(|l| path.find(l))
        .min()
    {
        return path[at..].to_string();
    }
    let has_path = path.contains('/') || path.contains('\\');
    if path.starts_with('<') {
        return if has_path {
            "<redacted>".into()
        } else {
            path.into()
        };
    }
    path.rsplit(['/', '\\'])
        .find(|p| !p.is_empty())
        .unwrap_or_default()
        .to_string()
}

/// The allocator settings kept: numbers, booleans and their tables (`roundup_power2_
/// divisions`), and `PYTORCH_CUDA_ALLOC_CONF` where it holds no path; any other string
/// could say anything.
fn settings(map: &mut serde_json::Map<String, Value>) {
    fn plain(v: &Value) -> bool {
        match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => true,
            Value::Object(o) => o.values().all(plain),
            Value::Array(a) => a.iter().all(plain),
            Value::String(_) => false,
        }
    }
    map.retain(|k, v| {
        plain(v)
            || (k == "PYTORCH_CUDA_ALLOC_CONF"
                && v.as_str()
                    .is_some_and(|s| !s.contains('/') && !s.contains('\\')))
    });
}

/// A PyTorch snapshot with every frame's path cut ([`snapshot_file`]: segments', blocks'
/// and the history's frames), written again as `vramtrace` writes snapshots: segments,
/// blocks, history and allocator settings, which every view reads. What it does not write
/// is left out: `record_function` annotations, entries' free-form `user_metadata` and
/// `compile_context` (they can hold anything) and the host allocator's segments. Function
/// names and line numbers stay.
pub fn snapshot(content: &[u8]) -> Result<Vec<u8>, String> {
    let mut snap = crate::snapshot::parse_snapshot(content)?;
    let cut = |frames: &mut crate::snapshot::Frames| {
        *frames = frames
            .iter()
            .map(|f| crate::snapshot::Frame {
                filename: snapshot_file(&f.filename).into(),
                ..f.clone()
            })
            .collect();
    };
    for d in &mut snap.devices {
        for seg in &mut d.segments {
            cut(&mut seg.frames);
            for b in &mut seg.blocks {
                cut(&mut b.frames);
            }
        }
        for e in &mut d.trace {
            cut(&mut e.frames);
            e.extra.clear();
        }
    }
    if let Some(map) = snap.allocator_settings.as_mut() {
        settings(map);
    }
    snap.host_segments.clear();
    snap.host_traces.clear();
    Ok(crate::snapshot::write::memory_viz_bytes(&snap))
}

#[cfg(test)]
mod tests {
    use super::snapshot_file;

    #[test]
    fn a_snapshot_frame_keeps_what_tells_library_from_user_and_no_more() {
        let cases = [
            (
                "/home/ada/venv/lib/python3.11/site-packages/torch/optim/adam.py",
                "/lib/python3.11/site-packages/torch/optim/adam.py",
            ),
            (
                "/opt/conda/lib/python3.10/runpy.py",
                "/lib/python3.10/runpy.py",
            ),
            ("/home/ada/proj/train.py", "train.py"),
            ("C:\\Users\\ada\\train.py", "train.py"),
            ("/home/ada/proj/", "proj"),
            ("<frozen runpy>", "<frozen runpy>"),
            ("<ipython-input-3-/home/ada/nb.ipynb>", "<redacted>"),
            ("train.py", "train.py"),
        ];
        for (path, kept) in cases {
            assert_eq!(snapshot_file(path), kept, "{path}");
        }
    }
}
