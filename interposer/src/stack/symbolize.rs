//! Names for return addresses, on the writer thread: module and offset always; function
//! (demangled), file and line where the module has symbols or debug information. They go
//! into the trace so that it reads the same on another machine. An address in code the
//! compiler inlined names every call of the inlined chain the debug information keeps.

use std::collections::HashMap;
use std::ops::Range;
use vramtrace_schema::Inlined;

/// The module name of Python frames.
pub const PYTHON_MODULE: &str = "<python>";

/// What is known of one frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameInfo {
    pub module: String,
    /// Offset of the address in its module's file address space.
    pub offset: u64,
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Calls inlined at the address, innermost first; `function` is the one whose code it is.
    pub inlined: Vec<Inlined>,
}

/// Inlined calls kept per address at most (the innermost ones): a bound on a frame
/// record's size whatever the debug information says.
const MAX_INLINED: usize = 64;

struct Known {
    path: String,
    base: u64,
    range: Range<u64>,
}

#[derive(Default)]
pub struct Symbolizer {
    modules: Vec<Known>,
    /// Unloads when `modules` was read: after one, an address may belong to another
    /// library than it did.
    unloads: u64,
    loaders: HashMap<String, Option<addr2line::Loader>>,
}

impl Symbolizer {
    fn module(&mut self, ip: u64) -> Option<&Known> {
        let unloads = crate::dlclose::unloads();
        if unloads != self.unloads || !self.modules.iter().any(|m| m.range.contains(&ip)) {
            self.unloads = unloads;
            self.modules = loaded_files();
        }
        self.modules.iter().find(|m| m.range.contains(&ip))
    }

    /// Describes the return address `ip`.
    pub fn frame(&mut self, ip: u64) -> FrameInfo {
        if let Some((file, function, line)) = super::python::describe(ip) {
            return FrameInfo {
                module: PYTHON_MODULE.into(),
                offset: line as u64,
                function: Some(function),
                file: (!file.is_empty()).then_some(file),
                line: (line != 0).then_some(line),
                ..Default::default()
            };
        }
        let Some(m) = self.module(ip) else {
            return FrameInfo {
                module: "?".into(),
                offset: ip,
                ..Default::default()
            };
        };
        let (path, offset) = (m.path.clone(), ip - m.base);
        let mut info = FrameInfo {
            module: path.clone(),
            offset,
            ..Default::default()
        };
        let loader = self
            .loaders
            .entry(path.clone())
            .or_insert_with(|| addr2line::Loader::new(&path).ok());
        let Some(loader) = loader else {
            return info;
        };
        // A return address points after the call: look up the call instruction itself.
        let probe = offset.saturating_sub(1);
        // Innermost first: the inlined calls, then the function the code belongs to.
        let mut calls = Vec::new();
        if let Ok(mut frames) = loader.find_frames(probe) {
            while let Ok(Some(frame)) = frames.next() {
                let (file, line) = match frame.location {
                    Some(loc) => (loc.file.map(str::to_string), loc.line),
                    None => (None, None),
                };
                let function = frame
                    .function
                    .as_ref()
                    .and_then(|f| f.demangle().ok())
                    .map(|n| n.into_owned());
                calls.push(Inlined {
                    function,
                    file,
                    line,
                });
            }
        }
        if let Some(own) = calls.pop() {
            info.function = own.function;
            info.file = own.file;
            info.line = own.line;
            calls.truncate(MAX_INLINED);
            info.inlined = calls;
        }
        if info.function.is_none() {
            info.function = loader
                .find_symbol(probe)
                .map(|name| addr2line::demangle_auto(name.into(), None).into_owned());
        }
        info
    }
}

/// The loaded files, as the loader reports them (load bias and the ranges of their
/// segments). `/proc/self/maps` cannot tell a library's own mappings from addr2line's map
/// of the same file, nor, for a small library whose segments all lie in the file's first
/// page, where one image of it ends. (`dl_iterate_phdr` takes the loader's write lock,
/// which no library constructor runs under: a thread in `dlopen` waiting for the writer
/// does not hold it.)
fn loaded_files() -> Vec<Known> {
    super::modules::loaded()
        .into_iter()
        .map(|m| Known {
            path: m.path,
            base: m.base,
            range: m.range,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_code_is_in_a_loaded_file_at_its_file_address() {
        let here = this_code_is_in_a_loaded_file_at_its_file_address as *const () as u64;
        let m = loaded_files()
            .into_iter()
            .find(|m| m.range.contains(&here))
            .expect("mapped");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(std::path::Path::new(&m.path), exe);
        let mut s = Symbolizer::default();
        let f = s.frame(here + 1);
        // The innermost frame at that address may be a function inlined into this one:
        // its file and line are still this test's.
        assert_eq!(f.offset, here + 1 - m.base);
        assert!(
            f.file
                .as_deref()
                .is_some_and(|p| p.ends_with("symbolize.rs")),
            "{f:?}"
        );
    }
}
