//! Python frames of a thread that does not hold the GIL: PyTorch's operators and ctypes'
//! `CDLL` calls release it around C code, and the thread's own frame chain stays as it was
//! while that code runs. It is read without the GIL and without calling into Python
//! beyond `PyGILState_GetThisThreadState` (a thread-specific key): every read goes through
//! [`OwnMemory`], so a wrong pointer is an error, never a fault; every code object and
//! string is checked to be one by its type; depth is bounded. What was read of a code
//! object is kept per thread, keyed by its address and checked against its header at
//! every use.
//!
//! A layout this module does not know, or reads that do not make sense under it, give no
//! frames and one warning for the process.

use super::own_memory::OwnMemory;
use super::python_layout::{self as layout, Instr, Layout};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

/// What is needed to read frames: the layout and the types objects are checked against.
pub struct Reader {
    layout: Layout,
    this_thread_state: unsafe extern "C" fn() -> *mut c_void,
    code_type: u64,
    str_type: u64,
    bytes_type: u64,
}

/// Set once the reads gave something that made no sense: the layout is not what it was
/// taken for, and no more frames are read this way.
static BROKEN: AtomicBool = AtomicBool::new(false);
static WARNED: AtomicBool = AtomicBool::new(false);

/// Longest string (characters) and line table (bytes) read per code object.
const MAX_STR: usize = 4096;
const MAX_TABLE: usize = 1 << 16;
/// Deepest Python stack read: past it the chain is taken for a loop.
const MAX_FRAMES: usize = 4096;
/// Bytes of a thread's data stack read at once (3.11 on).
const WINDOW: usize = 16 << 10;

/// A code object read before by this thread: its header's names, line table pointer and
/// first line, which tell whether the object at that address is still the same one, and
/// what was read of it.
struct Seen {
    key: [u64; 4],
    first: i32,
    index: u32,
    table: Box<[u8]>,
    /// The lines of the last few instruction offsets asked for: (offset, line).
    lines: Vec<(i64, u32)>,
}

/// Instruction offsets whose lines a code object keeps.
const LINES_KEPT: usize = 8;

/// The code objects one thread read, by address.
#[derive(Default)]
struct SeenCodes {
    by_address: HashMap<u64, Seen>,
    /// Bytes of line tables kept.
    bytes: usize,
}

/// Code objects, and bytes of their line tables, a thread keeps: past either, its table
/// is emptied.
const MAX_SEEN: usize = 4096;
const MAX_SEEN_BYTES: usize = 4 << 20;

impl SeenCodes {
    fn make_room(&mut self) {
        if self.by_address.len() >= MAX_SEEN || self.bytes >= MAX_SEEN_BYTES {
            *self = SeenCodes::default();
        }
    }
}

thread_local! {
    static SEEN: RefCell<SeenCodes> = RefCell::new(SeenCodes::default());
}

fn give_up(why: &str, minor: u32) {
    BROKEN.store(true, Ordering::Relaxed);
    crate::warn::once_for(
        &WARNED,
        &format!(
            "Python 3.{minor}'s frames cannot be read without the GIL ({why}): calls made \
             without the GIL get no Python frames"
        ),
    );
}

impl Reader {
    /// The reader for this interpreter, from its version (`Py_GetVersion`) and symbols
    /// (`find`); `None`, with the warning, when its layout is not known.
    pub fn new(version: &str, find: impl Fn(&std::ffi::CStr) -> Option<usize>) -> Option<Reader> {
        let minor = parse_minor(version)?;
        // A sandbox (seccomp) may refuse process_vm_readv even on the process itself.
        let probe = [1u8; 8];
        if OwnMemory::now().word(probe.as_ptr() as u64) != Some(u64::from_le_bytes(probe)) {
            give_up("process_vm_readv is not permitted here", minor);
            return None;
        }
        let layout = match minor {
            9..=12 => layout::fixed(minor),
            13 | 14 => {
                let runtime = find(c"_PyRuntime")? as u64;
                let mut words = [0u64; layout::DEBUG_WORDS];
                let mut bytes = [0u8; layout::DEBUG_WORDS * 8];
                if !OwnMemory::now().read(runtime, &mut bytes) {
                    give_up("_PyRuntime cannot be read", minor);
                    return None;
                }
                for (w, b) in words.iter_mut().zip(bytes.chunks_exact(8)) {
                    *w = u64::from_le_bytes(b.try_into().unwrap());
                }
                match layout::from_debug_offsets(minor, &words) {
                    Ok(l) => Some(l),
                    Err(why) => {
                        give_up(&why, minor);
                        return None;
                    }
                }
            }
            _ => None,
        };
        let Some(layout) = layout else {
            give_up("a version vramtrace does not know", minor);
            return None;
        };
        // SAFETY: CPython's exported function of this C signature.
        let this_thread_state = unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn() -> *mut c_void>(find(
                c"PyGILState_GetThisThreadState",
            )?)
        };
        Some(Reader {
            layout,
            this_thread_state,
            code_type: find(c"PyCode_Type")? as u64,
            str_type: find(c"PyUnicode_Type")? as u64,
            bytes_type: find(c"PyBytes_Type")? as u64,
        })
    }

    /// The calling thread's Python frames, innermost first and at most `limit`, each
    /// handed to `each` as the index `name` gives its (file, function) and its line;
    /// `None` when this thread has no Python state or its frames cannot be read.
    pub fn frames(
        &self,
        limit: usize,
        name: &mut dyn FnMut(String, String) -> u32,
        each: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Option<()> {
        if BROKEN.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: reads the thread-specific key CPython keeps this thread's state in.
        let tstate = unsafe { (self.this_thread_state)() } as u64;
        if tstate == 0 {
            return None;
        }
        let l = &self.layout;
        let mem = OwnMemory::now();
        let mut frame = mem.word(tstate + l.current_frame.0 as u64)?;
        if let Some(then) = l.current_frame.1 {
            frame = if frame == 0 {
                0
            } else {
                mem.word(frame + then as u64)?
            };
        }
        // A thread's frames are its own: they cannot change while it runs this code, so
        // a read that fails or a field that makes no sense means the layout is wrong.
        let walked = SEEN.try_with(|seen| {
            let mut seen = seen.try_borrow_mut().ok()?;
            seen.make_room();
            Some(self.walk(&mem, frame, limit, &mut seen, name, each))
        });
        match walked {
            Ok(Some(Ok(()))) => Some(()),
            Ok(Some(Err(why))) => {
                give_up(why, l.minor);
                None
            }
            // Thread teardown (this thread's table is gone), or a walk already under way.
            _ => None,
        }
    }

    /// Reads the frames, each pointing at its caller (from 3.11 many in one call, from the
    /// data stack below the innermost), then their code objects' headers in one call.
    fn walk(
        &self,
        mem: &OwnMemory,
        mut frame: u64,
        limit: usize,
        seen: &mut SeenCodes,
        name: &mut dyn FnMut(String, String) -> u32,
        each: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Result<(), &'static str> {
        let l = &self.layout;
        let size = [l.previous, l.code, l.instr, l.owner.map_or(0, |o| o.0)]
            .into_iter()
            .max()
            .unwrap()
            + 8;
        // From 3.11 a thread's frames lie on its own data stack, each caller below its
        // callee: one read of the bytes below a frame holds the frames of many callers.
        let window = if l.instr_kind == Instr::Pointer {
            WINDOW
        } else {
            size
        };
        let (mut lo, mut bytes) = (0u64, Vec::new());
        // (code object, byte offset of its instruction), innermost first.
        let mut frames: Vec<(u64, i64)> = Vec::new();
        let mut steps = 0;
        while frame != 0 && frames.len() < limit.min(MAX_FRAMES) {
            steps += 1;
            if steps > MAX_FRAMES {
                return Err("a frame chain with no end");
            }
            let end = frame
                .checked_add(size as u64)
                .ok_or("a frame cannot be read")?;
            if frame < lo || end > lo + bytes.len() as u64 {
                (lo, bytes) = mem.read_below(end, window.max(size));
                if frame < lo {
                    return Err("a frame cannot be read");
                }
            }
            let f = &bytes[(frame - lo) as usize..(end - lo) as usize];
            let at = |off: usize| u64::from_le_bytes(f[off..off + 8].try_into().unwrap());
            let int = |off: usize| i32::from_le_bytes(f[off..off + 4].try_into().unwrap()) as i64;
            // Frames owned by the C stack or the interpreter are shims, not functions.
            if l.owner.is_none_or(|(off, from)| f[off] < from) {
                let mut code = at(l.code);
                if l.tagged_code {
                    code &= !7;
                }
                let offset = match l.instr_kind {
                    Instr::LastiBytes => int(l.instr),
                    Instr::LastiUnits => 2 * int(l.instr),
                    Instr::Pointer => at(l.instr) as i64 - (code + l.code_adaptive as u64) as i64,
                };
                frames.push((code, offset));
            }
            frame = at(l.previous);
        }
        // Each code object once (recursion, loops over one function), in the order met.
        let mut codes: Vec<u64> = Vec::new();
        for &(code, _) in &frames {
            if !codes.contains(&code) {
                codes.push(code);
            }
        }
        let size = self.code_header();
        let mut headers = vec![0u8; size * codes.len()];
        if codes.contains(&0) || !mem.read_each(&codes, &mut headers) {
            return Err("a code object cannot be read");
        }
        for &(code, offset) in &frames {
            let i = codes.iter().position(|&c| c == code).unwrap();
            let header = &headers[i * size..(i + 1) * size];
            let known = self.code(mem, code, header, seen, name)?;
            let line = match known.lines.iter().find(|(o, _)| *o == offset) {
                Some(&(_, line)) => line,
                None => {
                    let line = u64::try_from(offset)
                        .ok()
                        .and_then(|o| layout::line_at(l.lines, &known.table, known.first, o))
                        .unwrap_or(0);
                    if known.lines.len() == LINES_KEPT {
                        known.lines.remove(0);
                    }
                    known.lines.push((offset, line));
                    line
                }
            };
            if !each(known.index, line) {
                break;
            }
        }
        Ok(())
    }

    /// Bytes of a code object's start that hold every field read.
    fn code_header(&self) -> usize {
        let l = &self.layout;
        [l.filename, l.name, l.linetable, l.firstlineno]
            .into_iter()
            .max()
            .unwrap()
            + 8
    }

    /// What is needed of code object `code`, whose first bytes are `c`: its names and line
    /// table are read again only when the pointers to them changed (another code object
    /// at the same address).
    fn code<'s>(
        &self,
        mem: &OwnMemory,
        code: u64,
        c: &[u8],
        seen: &'s mut SeenCodes,
        name: &mut dyn FnMut(String, String) -> u32,
    ) -> Result<&'s mut Seen, &'static str> {
        let l = &self.layout;
        let at = |off: usize| u64::from_le_bytes(c[off..off + 8].try_into().unwrap());
        if at(layout::OB_TYPE) != self.code_type {
            return Err("a frame's code is not a code object");
        }
        let first = i32::from_le_bytes(c[l.firstlineno..l.firstlineno + 4].try_into().unwrap());
        let key = [at(l.filename), at(l.name), at(l.linetable), first as u64];
        if seen.by_address.get(&code).is_some_and(|s| s.key == key) {
            return Ok(seen.by_address.get_mut(&code).unwrap());
        }
        let file = self.string(mem, key[0])?;
        let function = self.string(mem, key[1])?;
        let table = self.bytes(mem, key[2])?;
        let known = Seen {
            key,
            first,
            index: name(file, function),
            table: table.into(),
            lines: Vec::new(),
        };
        seen.bytes += known.table.len();
        Ok(seen.by_address.entry(code).insert_entry(known).into_mut())
    }

    fn string(&self, mem: &OwnMemory, obj: u64) -> Result<String, &'static str> {
        let l = &self.layout;
        let mut h = [0u8; 40];
        if obj == 0 || !mem.read(obj, &mut h) {
            return Err("a name cannot be read");
        }
        let word = |off: usize| u64::from_le_bytes(h[off..off + 8].try_into().unwrap());
        if word(layout::OB_TYPE) != self.str_type {
            return Err("a code object's name is not a str");
        }
        let length = word(layout::STR_LENGTH) as usize;
        let state = u32::from_le_bytes(
            h[layout::STR_STATE..layout::STR_STATE + 4]
                .try_into()
                .unwrap(),
        );
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
        if compact == 0 || !matches!(kind, 1 | 2 | 4) {
            return Err("a name that is not a compact str");
        }
        let chars = length.min(MAX_STR);
        let data = obj
            + l.ascii_size as u64
            + if ascii == 1 {
                0
            } else {
                l.compact_extra as u64
            };
        let mut raw = vec![0u8; chars * kind as usize];
        if !mem.read(data, &mut raw) {
            return Err("a name's characters cannot be read");
        }
        let text: String = match kind {
            1 => raw.iter().map(|&b| b as char).collect(),
            2 => raw
                .chunks_exact(2)
                .map(|c| {
                    char::from_u32(u16::from_le_bytes([c[0], c[1]]) as u32).unwrap_or('\u{fffd}')
                })
                .collect(),
            _ => raw
                .chunks_exact(4)
                .map(|c| {
                    char::from_u32(u32::from_le_bytes(c.try_into().unwrap())).unwrap_or('\u{fffd}')
                })
                .collect(),
        };
        Ok(text)
    }

    fn bytes(&self, mem: &OwnMemory, obj: u64) -> Result<Vec<u8>, &'static str> {
        let mut h = [0u8; layout::BYTES_DATA];
        if obj == 0 || !mem.read(obj, &mut h) {
            return Err("a line table cannot be read");
        }
        let word = |off: usize| u64::from_le_bytes(h[off..off + 8].try_into().unwrap());
        if word(layout::OB_TYPE) != self.bytes_type {
            return Err("a line table is not bytes");
        }
        let mut table = vec![0u8; (word(layout::OB_SIZE) as usize).min(MAX_TABLE)];
        if !mem.read(obj + layout::BYTES_DATA as u64, &mut table) {
            return Err("a line table's bytes cannot be read");
        }
        Ok(table)
    }
}

/// `3.11.2 (main, ...)` -> 11.
fn parse_minor(version: &str) -> Option<u32> {
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    if parts.next()? != "3" {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    static THREAD_STATE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    extern "C" fn fake_thread_state() -> *mut c_void {
        THREAD_STATE.load(Ordering::Relaxed) as *mut c_void
    }

    /// A 3.12 thread state whose frame's code is not a code object (the layout is not
    /// what it was taken for): no frames, and none read after it.
    #[test]
    fn a_layout_that_does_not_fit_gives_no_frames_and_stops_reading() {
        let object: &'static mut [u64; 32] = Box::leak(Box::new([0xdead; 32]));
        let frame: &'static mut [u64; 16] = Box::leak(Box::new([0; 16]));
        frame[0] = object.as_ptr() as u64;
        let cframe: &'static mut [u64; 2] = Box::leak(Box::new([frame.as_ptr() as u64, 0]));
        let tstate: &'static mut [u64; 16] = Box::leak(Box::new([0; 16]));
        tstate[7] = cframe.as_ptr() as u64;
        THREAD_STATE.store(tstate.as_ptr() as u64, Ordering::Relaxed);
        let reader = Reader {
            layout: layout::fixed(12).unwrap(),
            this_thread_state: fake_thread_state,
            code_type: 0xc0de,
            str_type: 0x57,
            bytes_type: 0xb7,
        };
        let mut name = |_: String, _: String| 0;
        assert!(reader.frames(64, &mut name, &mut |_, _| true).is_none());
        assert!(BROKEN.load(Ordering::Relaxed) && WARNED.load(Ordering::Relaxed));
        // Even a frame chain that would now make sense is not read.
        object[1] = 0xc0de;
        assert!(reader
            .frames(64, &mut name, &mut |_, _| panic!("no frame"))
            .is_none());
    }

    #[test]
    fn versions_name_their_minor_release() {
        assert_eq!(
            parse_minor("3.11.2 (main, Mar 13 2023, 12:18:29) [GCC 12.2.0]"),
            Some(11)
        );
        assert_eq!(parse_minor("3.14.0rc1"), Some(14));
        assert_eq!(parse_minor("2.7.18"), None);
    }
}
