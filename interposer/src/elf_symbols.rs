//! Looks a name up in a loaded object's dynamic symbol table, read in place through its
//! `PT_DYNAMIC` segment and GNU hash table, without asking the loader (whose lookup
//! functions vramtrace overrides).

use std::ffi::{c_int, c_void, CStr};

/// The address this library itself defines for `name`: what Rust code gets for an
/// exported function is the process's first definition of that name, which is another
/// library's when one preloaded before vramtrace exports the same name.
pub fn own(name: &[u8]) -> Option<usize> {
    static BASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut base = BASE.load(std::sync::atomic::Ordering::Relaxed);
    if base == 0 {
        base = crate::symbols::locate(own as *const () as usize)?.base;
        BASE.store(base, std::sync::atomic::Ordering::Relaxed);
    }
    find(&|info| load_start(info) == base, name)
}

/// `name` in the first loaded object `pick` accepts that defines it.
pub fn find(pick: &dyn Fn(&libc::dl_phdr_info) -> bool, name: &[u8]) -> Option<usize> {
    let mut search = Search {
        pick,
        name,
        found: None,
    };
    // SAFETY: the callback only reads loader data for mapped objects.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut search as *mut Search).cast()) };
    search.found
}

struct Search<'a> {
    pick: &'a dyn Fn(&libc::dl_phdr_info) -> bool,
    name: &'a [u8],
    found: Option<usize>,
}

unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
    let search = &mut *data.cast::<Search>();
    let info = &*info;
    if !(search.pick)(info) {
        return 0;
    }
    search.found = lookup(info, search.name);
    search.found.is_some() as c_int
}

/// The file name of an object (`libc.so.6`), empty for the main program.
pub fn file_name(info: &libc::dl_phdr_info) -> &[u8] {
    if info.dlpi_name.is_null() {
        return b"";
    }
    // SAFETY: the loader's name for a mapped object.
    let path = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
    path.rsplit(|&b| b == b'/').next().unwrap_or(path)
}

/// The address of an object's first loaded byte, as `dladdr` reports it (`dli_fbase`).
pub fn load_start(info: &libc::dl_phdr_info) -> usize {
    // SAFETY: the loader's program headers for this object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let first = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .map(|p| p.p_vaddr & !(p.p_align.max(1) - 1))
        .min()
        .unwrap_or(0);
    info.dlpi_addr as usize + first as usize
}

const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;

#[repr(C)]
struct Dyn {
    tag: i64,
    value: u64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

/// The address of the defined symbol `name` in the object `info` describes, if any.
///
/// # Safety
/// `info` describes an object the loader has mapped (as `dl_iterate_phdr` passes it).
unsafe fn lookup(info: &libc::dl_phdr_info, wanted: &[u8]) -> Option<usize> {
    let base = info.dlpi_addr as usize;
    let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
    let dynamic = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
    let mut d = (base + dynamic.p_vaddr as usize) as *const Dyn;
    let (mut strtab, mut symtab, mut hash) = (0usize, 0usize, 0usize);
    while (*d).tag != DT_NULL {
        // The loader relocates these entries in place on most targets, not on all.
        let at = |v: u64| {
            let v = v as usize;
            if v < base {
                v + base
            } else {
                v
            }
        };
        match (*d).tag {
            DT_STRTAB => strtab = at((*d).value),
            DT_SYMTAB => symtab = at((*d).value),
            DT_GNU_HASH => hash = at((*d).value),
            _ => {}
        }
        d = d.add(1);
    }
    if strtab == 0 || symtab == 0 || hash == 0 {
        return None;
    }
    let header = hash as *const u32;
    let (nbuckets, symoffset, bloom_words) = (*header, *header.add(1), *header.add(2));
    if nbuckets == 0 {
        return None;
    }
    let buckets = header.add(4 + 2 * bloom_words as usize);
    let chains = buckets.add(nbuckets as usize);
    let h = wanted
        .iter()
        .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32));
    let mut i = *buckets.add((h % nbuckets) as usize);
    if i < symoffset {
        return None;
    }
    loop {
        let h2 = *chains.add((i - symoffset) as usize);
        if h | 1 == h2 | 1 {
            let sym = &*(symtab as *const Sym).add(i as usize);
            let sym_name = CStr::from_ptr((strtab + sym.name as usize) as *const libc::c_char);
            if sym.shndx != 0 && sym.value != 0 && sym_name.to_bytes() == wanted {
                return Some(base + sym.value as usize);
            }
        }
        if h2 & 1 != 0 {
            return None;
        }
        i += 1;
    }
}
