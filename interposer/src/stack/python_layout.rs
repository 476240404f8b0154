//! Where CPython keeps a thread's frames, per version (x86-64, release builds with the
//! GIL): the offsets [`super::python_nogil`] reads them at, and how a code object maps an
//! instruction to its line. 3.9 and 3.10 chain frame objects; 3.11 moved frames into
//! `_PyInterpreterFrame`s reached through `cframe`; 3.12 reordered them and added C-stack
//! shim frames; 3.13 dropped `cframe` and publishes its offsets in `_PyRuntime`'s
//! `_Py_DebugOffsets`, as 3.14 does (where the frame's code is a tagged `_PyStackRef`).

/// How a frame says which instruction it is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instr {
    /// `f_lasti`, an `int` counting bytes (3.9).
    LastiBytes,
    /// `f_lasti`, an `int` counting 2-byte code units (3.10).
    LastiUnits,
    /// A pointer into the code object's `co_code_adaptive` (3.11 on).
    Pointer,
}

/// How a code object's line table is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lines {
    /// `co_lnotab`: (address step, signed line step) byte pairs (3.9).
    Lnotab,
    /// `co_linetable` of PEP 626: (address step, signed line step, -128: none) (3.10).
    Pep626,
    /// `co_linetable` of PEP 657: variable-length location entries (3.11 on).
    Locations,
}

/// Byte offsets of the fields read, and how to read them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub minor: u32,
    /// `PyThreadState` -> innermost frame: the pointer at `tstate + .0`, then (3.11, 3.12:
    /// through `cframe`) the pointer at `that + .1`.
    pub current_frame: (usize, Option<usize>),
    pub previous: usize,
    pub code: usize,
    pub instr: usize,
    pub instr_kind: Instr,
    /// The frame's `owner` byte; frames owned by this value or above are the C stack's
    /// or the interpreter's shims, not Python functions (3.12 on).
    pub owner: Option<(usize, u8)>,
    /// The code pointer has tag bits (3.14's `_PyStackRef`).
    pub tagged_code: bool,
    pub firstlineno: usize,
    pub filename: usize,
    pub name: usize,
    pub linetable: usize,
    pub code_adaptive: usize,
    pub lines: Lines,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start; a
    /// compact non-ASCII string's start `compact_extra` bytes later.
    pub ascii_size: usize,
    pub compact_extra: usize,
}

/// The header of every object: the type pointer's offset.
pub const OB_TYPE: usize = 8;
/// `PyVarObject.ob_size` and `PyBytesObject.ob_sval`.
pub const OB_SIZE: usize = 16;
pub const BYTES_DATA: usize = 32;
/// `PyASCIIObject.length` and `.state`.
pub const STR_LENGTH: usize = 16;
pub const STR_STATE: usize = 32;

/// The layouts known without the interpreter's help (3.9 to 3.12), from the headers of
/// each release.
pub fn fixed(minor: u32) -> Option<Layout> {
    let before_311 = |lasti, instr_kind, lines| Layout {
        minor,
        current_frame: (24, None),
        previous: 24,
        code: 32,
        instr: lasti,
        instr_kind,
        owner: None,
        tagged_code: false,
        firstlineno: 40,
        filename: 104,
        name: 112,
        linetable: 120,
        code_adaptive: 0,
        lines,
        ascii_size: 48,
        compact_extra: 24,
    };
    Some(match minor {
        9 => before_311(104, Instr::LastiBytes, Lines::Lnotab),
        10 => before_311(96, Instr::LastiUnits, Lines::Pep626),
        11 => Layout {
            minor,
            current_frame: (56, Some(8)),
            previous: 48,
            code: 32,
            instr: 56,
            instr_kind: Instr::Pointer,
            owner: None,
            tagged_code: false,
            firstlineno: 72,
            filename: 112,
            name: 120,
            linetable: 136,
            code_adaptive: 184,
            lines: Lines::Locations,
            ascii_size: 48,
            compact_extra: 24,
        },
        12 => Layout {
            minor,
            current_frame: (56, Some(0)),
            previous: 8,
            code: 0,
            instr: 56,
            instr_kind: Instr::Pointer,
            owner: Some((70, 3)),
            tagged_code: false,
            firstlineno: 68,
            filename: 112,
            name: 120,
            linetable: 136,
            code_adaptive: 192,
            lines: Lines::Locations,
            ascii_size: 40,
            compact_extra: 16,
        },
        _ => return None,
    })
}

/// `_Py_DebugOffsets` (3.13, 3.14): the offsets of the fields used, as u64 words at these
/// indexes of the struct after its cookie, version and free-threading flag, which
/// differ between the two by the fields each release added.
struct DebugIndexes {
    thread_current_frame: usize,
    frame_size: usize,
    frame_previous: usize,
    frame_executable: usize,
    frame_instr_ptr: usize,
    frame_owner: usize,
    code_filename: usize,
    code_name: usize,
    code_linetable: usize,
    code_firstlineno: usize,
    code_adaptive: usize,
    object_size: usize,
    object_type: usize,
}

fn debug_indexes(minor: u32) -> Option<DebugIndexes> {
    // Words from the struct's start: cookie (1), version (2), free_threaded (3), then
    // runtime_state (3 words), interpreter_state (13 words in 3.13; 3.14 adds
    // threads_main), thread_state (9), interpreter_frame (6; 3.14 adds stackpointer),
    // code_object (10), pyobject (2).
    let interp_words = match minor {
        13 => 13,
        14 => 14,
        _ => return None,
    };
    let frame_words = if minor == 13 { 6 } else { 7 };
    let thread = 3 + 3 + interp_words;
    let frame = thread + 9;
    let code = frame + frame_words;
    let object = code + 10;
    Some(DebugIndexes {
        thread_current_frame: thread + 4,
        frame_size: frame,
        frame_previous: frame + 1,
        frame_executable: frame + 2,
        frame_instr_ptr: frame + 3,
        frame_owner: frame + 5,
        code_filename: code + 1,
        code_name: code + 2,
        code_linetable: code + 4,
        code_firstlineno: code + 5,
        code_adaptive: code + 9,
        object_size: object,
        object_type: object + 1,
    })
}

/// Words of `_Py_DebugOffsets` to read: enough for every index above.
pub const DEBUG_WORDS: usize = 64;

/// The layout a 3.13 or 3.14 interpreter describes in `_Py_DebugOffsets` (`words`, read
/// from `_PyRuntime`), checked for sense; `Err` says why it cannot be used.
pub fn from_debug_offsets(minor: u32, words: &[u64; DEBUG_WORDS]) -> Result<Layout, String> {
    if &words[0].to_le_bytes() != b"xdebugpy" {
        return Err("no _Py_DebugOffsets in _PyRuntime".into());
    }
    let version = words[1];
    if (version >> 24, (version >> 16) & 0xff) != (3, minor as u64) {
        return Err(format!("_Py_DebugOffsets of version {version:#x}"));
    }
    if words[2] != 0 {
        return Err("a free-threaded build".into());
    }
    let ix = debug_indexes(minor).ok_or("an unknown _Py_DebugOffsets")?;
    // The object header's size and type offset are the same in every build with the GIL:
    // they show the indexes are right.
    if (words[ix.object_size], words[ix.object_type]) != (16, OB_TYPE as u64) {
        return Err("_Py_DebugOffsets laid out otherwise than known".into());
    }
    let frame_size = words[ix.frame_size];
    let field = |i: usize, within: u64| -> Result<usize, String> {
        let v = words[i];
        if v >= within {
            return Err(format!("an offset out of range in _Py_DebugOffsets ({v})"));
        }
        Ok(v as usize)
    };
    const OBJECT_LIMIT: u64 = 4096;
    Ok(Layout {
        minor,
        current_frame: (field(ix.thread_current_frame, OBJECT_LIMIT)?, None),
        previous: field(ix.frame_previous, frame_size)?,
        code: field(ix.frame_executable, frame_size)?,
        instr: field(ix.frame_instr_ptr, frame_size)?,
        instr_kind: Instr::Pointer,
        owner: Some((field(ix.frame_owner, frame_size)?, 3)),
        tagged_code: minor >= 14,
        firstlineno: field(ix.code_firstlineno, OBJECT_LIMIT)?,
        filename: field(ix.code_filename, OBJECT_LIMIT)?,
        name: field(ix.code_name, OBJECT_LIMIT)?,
        linetable: field(ix.code_linetable, OBJECT_LIMIT)?,
        code_adaptive: field(ix.code_adaptive, OBJECT_LIMIT)?,
        lines: Lines::Locations,
        ascii_size: 40,
        compact_extra: 16,
    })
}

/// The line of the instruction at byte offset `at` of a code object whose first line is
/// `first` and whose line table is `table`; `None` for an instruction without one.
pub fn line_at(lines: Lines, table: &[u8], first: i32, at: u64) -> Option<u32> {
    let line = match lines {
        Lines::Lnotab => lnotab_line(table, first, at),
        Lines::Pep626 => pep626_line(table, first, at),
        Lines::Locations => location_line(table, first, at),
    }?;
    u32::try_from(line).ok()
}

fn lnotab_line(table: &[u8], first: i32, at: u64) -> Option<i64> {
    let (mut line, mut addr) = (first as i64, 0u64);
    for pair in table.chunks_exact(2) {
        addr += pair[0] as u64;
        if addr > at {
            break;
        }
        line += pair[1] as i8 as i64;
    }
    Some(line)
}

fn pep626_line(table: &[u8], first: i32, at: u64) -> Option<i64> {
    let (mut line, mut start) = (first as i64, 0u64);
    for pair in table.chunks_exact(2) {
        let end = start + pair[0] as u64;
        let delta = pair[1] as i8;
        if delta != -128 {
            line += delta as i64;
        }
        if (start..end).contains(&at) {
            return (delta != -128).then_some(line);
        }
        start = end;
    }
    None
}

/// PEP 657's table: each entry's first byte holds a flag bit, a 4-bit kind and the entry's
/// length in code units less one; kinds say how the line changes and what follows.
fn location_line(table: &[u8], first: i32, at: u64) -> Option<i64> {
    let mut bytes = table.iter().copied();
    let (mut line, mut start) = (first as i64, 0u64);
    while let Some(head) = bytes.next() {
        if head & 0x80 == 0 {
            return None;
        }
        let kind = (head >> 3) & 15;
        let end = start + 2 * ((head & 7) as u64 + 1);
        let has_line = match kind {
            15 => false,
            14 => {
                line += signed(&mut bytes)?;
                for _ in 0..3 {
                    varint(&mut bytes)?;
                }
                true
            }
            13 => {
                line += signed(&mut bytes)?;
                true
            }
            10..=12 => {
                line += (kind - 10) as i64;
                bytes.nth(1)?;
                true
            }
            _ => {
                bytes.next()?;
                true
            }
        };
        if (start..end).contains(&at) {
            return has_line.then_some(line);
        }
        start = end;
    }
    None
}

/// An unsigned varint of the location table: 6 bits a byte, bit 6 set when more follow.
fn varint(bytes: &mut impl Iterator<Item = u8>) -> Option<u64> {
    let (mut value, mut shift) = (0u64, 0u32);
    loop {
        let b = bytes.next()?;
        value |= ((b & 63) as u64).checked_shl(shift)?;
        shift += 6;
        if b & 64 == 0 {
            return Some(value);
        }
    }
}

/// A signed varint: the sign in the lowest bit.
fn signed(bytes: &mut impl Iterator<Item = u8>) -> Option<i64> {
    let v = varint(bytes)?;
    let magnitude = (v >> 1) as i64;
    Some(if v & 1 != 0 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_tables_give_each_instruction_its_line() {
        // first line 10. Entry 1: kind 13 (line only), 2 units, line +1 -> 11.
        // Entry 2: kind 0 (short form, same line), 1 unit, one column byte.
        // Entry 3: kind 11 (one line, +1) -> 12, 3 units, two column bytes.
        // Entry 4: kind 14 (long), 1 unit, line -2 -> 10, then three varints.
        // Entry 5: kind 15 (no location), 1 unit.
        let table = [
            0x80 | (13 << 3) | 1,
            2,    // +1
            0x80, // kind 0, 1 unit
            5,
            0x80 | (11 << 3) | 2,
            1,
            9,
            0x80 | (14 << 3),
            5, // -2
            0,
            3,
            7,
            0x80 | (15 << 3),
        ];
        let at = |unit: u64| line_at(Lines::Locations, &table, 10, unit * 2);
        assert_eq!(
            (0..9).map(at).collect::<Vec<_>>(),
            [
                Some(11),
                Some(11),
                Some(11),
                Some(12),
                Some(12),
                Some(12),
                Some(10),
                None,
                None
            ]
        );
    }

    #[test]
    fn older_tables_give_each_instruction_its_line() {
        // lnotab: from byte 0 line 5; at byte 6 line +2; at byte 10 line -1.
        let lnotab = [6, 2, 4, 0xff];
        let at = |b| line_at(Lines::Lnotab, &lnotab, 5, b);
        assert_eq!(
            [at(0), at(5), at(6), at(9), at(10), at(40)].map(|l| l.unwrap()),
            [5, 5, 7, 7, 6, 6]
        );
        // PEP 626: bytes 0-3 line +0 (5), 4-7 no line, 8-9 line +3 (8).
        let pep626 = [4, 0, 4, 0x80, 2, 3];
        let at = |b| line_at(Lines::Pep626, &pep626, 5, b);
        assert_eq!(
            [at(0), at(3), at(4), at(8), at(9), at(10)],
            [Some(5), Some(5), None, Some(8), Some(8), None]
        );
    }

    #[test]
    fn debug_offsets_are_refused_unless_they_make_sense() {
        let mut words = [0u64; DEBUG_WORDS];
        assert!(from_debug_offsets(13, &words).is_err());
        words[0] = u64::from_le_bytes(*b"xdebugpy");
        words[1] = 0x030d_00f0;
        let ix = debug_indexes(13).unwrap();
        assert!(from_debug_offsets(13, &words).is_err(), "no object header");
        words[ix.object_size] = 16;
        words[ix.object_type] = 8;
        words[ix.frame_size] = 80;
        words[ix.frame_previous] = 8;
        words[ix.frame_owner] = 70;
        words[ix.frame_instr_ptr] = 56;
        words[ix.thread_current_frame] = 72;
        let l = from_debug_offsets(13, &words).unwrap();
        assert_eq!(
            (l.current_frame, l.previous, l.owner),
            ((72, None), 8, Some((70, 3)))
        );
        words[ix.frame_owner] = 800;
        assert!(
            from_debug_offsets(13, &words).is_err(),
            "owner past the frame"
        );
        words[ix.frame_owner] = 70;
        words[2] = 1;
        assert!(from_debug_offsets(13, &words).is_err(), "free-threaded");
        assert!(from_debug_offsets(14, &words).is_err(), "another version");
    }
}
