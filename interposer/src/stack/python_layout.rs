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

/// Where the sections used begin in `_Py_DebugOffsets` (3.13, 3.14), in u64 words. Each
/// section is a size and then offsets, and releases add fields to sections (3.14 to the
/// interpreter's and the frame's), so the sections are found by what every release has
/// in them, not by counting: the thread state's `prev`, `next` and `interp` at 0, 8 and
/// 16; the frame's `previous` at 8 after its code at 0; the object header's size 16 and
/// type at 8, right after the code object's 10 words. Within a section, the fields used
/// have kept their places.
struct Sections {
    thread: usize,
    frame: usize,
    code: usize,
}

fn sections(words: &[u64; DEBUG_WORDS]) -> Option<Sections> {
    let thread = (3..DEBUG_WORDS - 5)
        .find(|&i| (64..1 << 16).contains(&words[i]) && words[i + 1..i + 4] == [0, 8, 16])?;
    let frame = (thread + 5..DEBUG_WORDS - 6)
        .find(|&i| (32..=512).contains(&words[i]) && words[i + 1..i + 3] == [8, 0])?;
    let object = (frame + 6..DEBUG_WORDS - 1).find(|&i| words[i..i + 2] == [16, OB_TYPE as u64])?;
    let code = object.checked_sub(10).filter(|&c| c >= frame + 6)?;
    Some(Sections {
        thread,
        frame,
        code,
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
    let at = sections(words).ok_or("_Py_DebugOffsets laid out otherwise than known")?;
    let frame_size = words[at.frame];
    let field = |i: usize, within: u64| -> Result<usize, String> {
        let v = words[i];
        if v >= within {
            return Err(format!("an offset out of range in _Py_DebugOffsets ({v})"));
        }
        Ok(v as usize)
    };
    Ok(Layout {
        minor,
        current_frame: (field(at.thread + 4, words[at.thread])?, None),
        previous: field(at.frame + 1, frame_size)?,
        code: field(at.frame + 2, frame_size)?,
        instr: field(at.frame + 3, frame_size)?,
        instr_kind: Instr::Pointer,
        owner: Some((field(at.frame + 5, frame_size)?, 3)),
        tagged_code: minor >= 14,
        firstlineno: field(at.code + 5, words[at.code])?,
        filename: field(at.code + 1, words[at.code])?,
        name: field(at.code + 2, words[at.code])?,
        linetable: field(at.code + 4, words[at.code])?,
        code_adaptive: field(at.code + 9, words[at.code] + 1)?,
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

    /// `_Py_DebugOffsets` as 3.13.0 fills it (the offsets this machine's 3.13 headers
    /// give), with `extra` more words in the interpreter and thread sections, as later
    /// releases add.
    fn debug_offsets(extra: usize) -> [u64; DEBUG_WORDS] {
        let mut w = vec![u64::from_le_bytes(*b"xdebugpy"), 0x030d_00f0, 0];
        w.extend([100_000, 16, 24]); // runtime state
        w.extend([8000, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 11, 12]); // interpreter state
        w.extend(std::iter::repeat_n(40, extra));
        w.extend([320, 0, 8, 16, 72, 150, 158, 166, 174]); // thread state
        w.extend(std::iter::repeat_n(40, extra));
        w.extend([80, 8, 0, 56, 72, 70]); // interpreter frame
        w.extend([208, 112, 120, 128, 136, 68, 36, 96, 104, 200]); // code object
        w.extend([16, 8, 416, 24, 88, 168]); // object, type
        w.resize(DEBUG_WORDS, 0);
        w.try_into().unwrap()
    }

    #[test]
    fn debug_offsets_give_the_layout_wherever_sections_grew() {
        for extra in [0, 1, 3] {
            let l = from_debug_offsets(13, &debug_offsets(extra)).unwrap();
            assert_eq!(
                (l.current_frame, l.previous, l.code, l.instr, l.owner),
                ((72, None), 8, 0, 56, Some((70, 3))),
                "{extra} more words"
            );
            assert_eq!(
                (
                    l.filename,
                    l.name,
                    l.linetable,
                    l.firstlineno,
                    l.code_adaptive
                ),
                (112, 120, 136, 68, 200)
            );
        }
    }

    #[test]
    fn debug_offsets_are_refused_unless_they_make_sense() {
        let good = debug_offsets(0);
        assert!(from_debug_offsets(13, &good).is_ok());
        assert!(from_debug_offsets(14, &good).is_err(), "another version");
        let mut w = good;
        w[0] = 0;
        assert!(from_debug_offsets(13, &w).is_err(), "no cookie");
        let mut w = good;
        w[2] = 1;
        assert!(from_debug_offsets(13, &w).is_err(), "free-threaded");
        // The frame's owner past the frame's size.
        let mut w = good;
        let owner = w.iter().position(|&v| v == 70).unwrap();
        w[owner] = 800;
        assert!(from_debug_offsets(13, &w).is_err(), "owner past the frame");
        // No object header where the code object's section ends.
        let mut w = good;
        let object = w.windows(2).position(|p| p == [16, 8]).unwrap();
        w[object] = 24;
        assert!(from_debug_offsets(13, &w).is_err(), "object header");
    }
}
