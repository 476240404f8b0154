//! Names for return addresses, on the writer thread: module and offset always; function
//! (demangled), file and line where the module has symbols or debug information. They go
//! into the trace so that it reads the same on another machine.

use std::collections::HashMap;
use std::ops::Range;

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
}

struct Known {
    path: String,
    base: u64,
    range: Range<u64>,
}

#[derive(Default)]
pub struct Symbolizer {
    modules: Vec<Known>,
    /// `dlclose` calls begun when `modules` was read: after one, an address may belong to
    /// another library than it did.
    closes: u64,
    loaders: HashMap<String, Option<addr2line::Loader>>,
}

impl Symbolizer {
    fn module(&mut self, ip: u64) -> Option<&Known> {
        let closes = crate::unload::begun();
        if closes != self.closes || !self.modules.iter().any(|m| m.range.contains(&ip)) {
            self.closes = closes;
            self.modules = mapped_files();
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
        if let Ok(mut frames) = loader.find_frames(probe) {
            if let Ok(Some(frame)) = frames.next() {
                info.function = frame
                    .function
                    .as_ref()
                    .and_then(|f| f.demangle().ok())
                    .map(|n| n.into_owned());
                if let Some(loc) = frame.location {
                    info.file = loc.file.map(str::to_string);
                    info.line = loc.line;
                }
            }
        }
        if info.function.is_none() {
            info.function = loader
                .find_symbol(probe)
                .map(|name| addr2line::demangle_auto(name.into(), None).into_owned());
        }
        info
    }
}

/// The files mapped into this process, from `/proc/self/maps`: read without the loader's
/// lock (`dl_iterate_phdr` takes it), since the writer runs this while holding its own
/// lock and a thread inside `dlopen` may be waiting for that.
fn mapped_files() -> Vec<Known> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    images(&maps)
}

/// The images of files in a `/proc/PID/maps` text.
fn images(maps: &str) -> Vec<Known> {
    let mut out: Vec<Known> = Vec::new();
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let mut fields = line.split_whitespace();
        let (Some(range), Some(_), Some(offset), Some(_), Some(_), Some(path)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(start, 16),
            u64::from_str_radix(end, 16),
            u64::from_str_radix(offset, 16),
        ) else {
            continue;
        };
        match out.last_mut() {
            // A mapping at file offset 0 starts another image of the file: besides the
            // loaded one, addr2line maps the whole file to read its symbols, and that map
            // can lie right below the library's own.
            Some(m) if m.path == path && offset != 0 => m.range.end = end,
            _ => out.push(Known {
                path: path.to_string(),
                // The first mapping of an ELF file maps its start: file addresses count from it.
                base: start - offset,
                range: start..end,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_whole_file_map_below_a_library_is_not_taken_for_it() {
        // addr2line's map of libc.so.6 (offset 0, the whole file) right below libc itself.
        let maps = "\
7f0000000000-7f00001f0000 r--p 00000000 fe:00 1 /usr/lib/libc.so.6
7f00001f0000-7f0000216000 r--p 00000000 fe:00 1 /usr/lib/libc.so.6
7f0000216000-7f000036c000 r-xp 00026000 fe:00 1 /usr/lib/libc.so.6
7f000036c000-7f00003c5000 rw-p 001d3000 fe:00 1 /usr/lib/libc.so.6
7f00003c5000-7f00003c6000 rw-p 00000000 00:00 0
";
        let images = super::images(maps);
        let ip = 0x7f0000216000 + 0x1234;
        let libc = images.iter().find(|m| m.range.contains(&ip)).unwrap();
        assert_eq!(libc.base, 0x7f00001f0000);
        assert_eq!(ip - libc.base, 0x26000 + 0x1234);
        assert_eq!(images.len(), 2);
    }

    use super::*;

    #[test]
    fn this_code_is_in_a_mapped_file_at_its_file_offset() {
        let here = this_code_is_in_a_mapped_file_at_its_file_offset as *const () as u64;
        let m = mapped_files()
            .into_iter()
            .find(|m| m.range.contains(&here))
            .expect("mapped");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(std::path::Path::new(&m.path), exe);
        let mut s = Symbolizer::default();
        let f = s.frame(here + 1);
        assert!(f
            .function
            .unwrap_or_default()
            .contains("this_code_is_in_a_mapped_file"));
    }
}
