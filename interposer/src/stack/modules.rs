//! The loaded modules (executable and shared libraries), as `dl_iterate_phdr` reports
//! them: address ranges and their unwind sections, in memory.

use std::ffi::CStr;
use std::ops::Range;
use std::sync::{RwLock, RwLockWriteGuard};

/// Bytes of a loaded module's mapped image. Valid while the module stays loaded.
#[derive(Clone, Copy)]
pub struct MappedBytes {
    ptr: *const u8,
    len: usize,
}

// SAFETY: read-only views of mapped library images, shared by every thread.
unsafe impl Send for MappedBytes {}
unsafe impl Sync for MappedBytes {}

impl Default for MappedBytes {
    fn default() -> Self {
        MappedBytes {
            ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
            len: 0,
        }
    }
}

impl std::ops::Deref for MappedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the range lies inside a PT_LOAD segment of a loaded module.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// One loaded module.
#[derive(Clone)]
pub struct LoadedModule {
    /// Path of the file (`/proc/self/exe` resolved for the main program).
    pub path: String,
    /// Load bias: runtime address = file address + base.
    pub base: u64,
    /// Runtime addresses its segments cover.
    pub range: Range<u64>,
    /// File-address range and bytes of the executable segment.
    pub text: Option<(Range<u64>, MappedBytes)>,
    pub eh_frame_hdr: Option<(Range<u64>, MappedBytes)>,
    pub eh_frame: Option<(Range<u64>, MappedBytes)>,
}

struct Collect(Vec<LoadedModule>);

unsafe extern "C" fn each(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    let out = &mut *(data as *mut Collect);
    let info = &*info;
    let headers = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
    let base = info.dlpi_addr;
    let (mut lo, mut hi) = (u64::MAX, 0);
    let mut text = None;
    let mut hdr = None;
    for h in headers {
        match h.p_type {
            libc::PT_LOAD => {
                lo = lo.min(base + h.p_vaddr);
                hi = hi.max(base + h.p_vaddr + h.p_memsz);
                if h.p_flags & libc::PF_X != 0 {
                    let bytes = MappedBytes {
                        ptr: (base + h.p_vaddr) as *const u8,
                        len: h.p_memsz as usize,
                    };
                    text = Some((h.p_vaddr..h.p_vaddr + h.p_memsz, bytes));
                }
            }
            libc::PT_GNU_EH_FRAME => {
                let bytes = MappedBytes {
                    ptr: (base + h.p_vaddr) as *const u8,
                    len: h.p_memsz as usize,
                };
                hdr = Some((h.p_vaddr..h.p_vaddr + h.p_memsz, bytes));
            }
            _ => {}
        }
    }
    if lo >= hi {
        return 0;
    }
    let range = lo..hi;
    let eh_frame = hdr
        .as_ref()
        .and_then(|(svma, bytes)| eh_frame_of(svma.start, bytes, headers));
    let name = if info.dlpi_name.is_null() {
        ""
    } else {
        CStr::from_ptr(info.dlpi_name).to_str().unwrap_or("")
    };
    let path = if name.is_empty() {
        exe().to_string()
    } else {
        name.to_string()
    };
    out.0.push(LoadedModule {
        path,
        base,
        range,
        text,
        eh_frame_hdr: hdr,
        eh_frame,
    });
    0
}

/// `.eh_frame` from the pointer in `.eh_frame_hdr` (encoded pc-relative sdata4, as GNU
/// ld and lld write it), up to the end of the segment that holds it: the section's exact
/// size is not in the program headers, and the header's table only points inside it.
fn eh_frame_of(
    hdr_svma: u64,
    hdr: &MappedBytes,
    headers: &[libc::Elf64_Phdr],
) -> Option<(Range<u64>, MappedBytes)> {
    const PCREL_SDATA4: u8 = 0x1b;
    if hdr.len() < 8 || hdr[0] != 1 || hdr[1] != PCREL_SDATA4 {
        return None;
    }
    let rel = i32::from_le_bytes(hdr[4..8].try_into().ok()?) as i64;
    let start = (hdr_svma as i64 + 4 + rel) as u64;
    let segment = headers.iter().find(|h| {
        h.p_type == libc::PT_LOAD && (h.p_vaddr..h.p_vaddr + h.p_memsz).contains(&start)
    })?;
    let end = segment.p_vaddr + segment.p_memsz;
    let base = hdr.ptr as u64 - hdr_svma;
    Some((
        start..end,
        MappedBytes {
            ptr: (base + start) as *const u8,
            len: (end - start) as usize,
        },
    ))
}

/// The program's own file, read once: a fork keeps it, an exec loads this library
/// afresh. The thread's link, because the process's cannot be read once `main` has
/// called `pthread_exit` (the process's where there is no `/proc/thread-self`: Linux
/// before 3.17).
pub fn exe() -> &'static str {
    static EXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        std::fs::read_link("/proc/thread-self/exe")
            .or_else(|_| std::fs::read_link("/proc/self/exe"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    })
}

/// Every module loaded now.
pub fn loaded() -> Vec<LoadedModule> {
    let mut out = Collect(Vec::new());
    let _scan = SCAN.read().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the callback only reads the loader's structures for the call's duration.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut out as *mut Collect as *mut libc::c_void) };
    out.0
}

/// Whether a loaded object's file name (the part after the last `/`) starts with
/// `prefix`. Reads the loader's list only: nothing is opened (a `dlopen` with
/// `RTLD_NOLOAD` of a name not loaded opens the files it finds on the library path).
pub fn any_named(prefix: &[u8]) -> bool {
    struct Ask<'a> {
        prefix: &'a [u8],
        found: bool,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        let ask = &mut *(data as *mut Ask);
        let name = (*info).dlpi_name;
        if name.is_null() {
            return 0;
        }
        let name = std::ffi::CStr::from_ptr(name).to_bytes();
        let file = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
        ask.found = file.starts_with(ask.prefix);
        ask.found as libc::c_int
    }
    let mut ask = Ask {
        prefix,
        found: false,
    };
    let _scan = SCAN.read().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the callback only reads the loader's structures for the call's duration.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut ask as *mut Ask as *mut libc::c_void) };
    ask.found
}

/// How many objects the loader has unloaded so far (`dlpi_subs`).
pub fn unloads_so_far() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        *(data as *mut u64) = (*info).dlpi_subs;
        1
    }
    let mut subs = 0u64;
    let _scan = SCAN.read().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the callback writes one u64 through the pointer it is given.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut subs as *mut u64 as *mut libc::c_void) };
    subs
}

/// Held (shared) by every `dl_iterate_phdr` call of vramtrace's, and exclusively across a
/// fork: glibc resets its other loader locks in the child but not the one that
/// `dl_iterate_phdr` takes, so a fork in the middle of one left the child unable to list
/// its modules, or to dlopen, ever again.
static SCAN: RwLock<()> = RwLock::new(());

/// The scan lock, held across a fork by the forking thread.
pub struct ForkHold(#[allow(dead_code)] RwLockWriteGuard<'static, ()>);

pub fn hold_for_fork() -> ForkHold {
    ForkHold(SCAN.write().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_is_found_by_its_name() {
        assert!(any_named(b"libc.so"));
        assert!(!any_named(b"libnot-loaded-here.so"));
    }

    #[test]
    fn this_test_binary_and_libc_are_listed_with_unwind_data() {
        let modules = loaded();
        let here = modules
            .iter()
            .find(|m| m.range.contains(&(loaded as *const () as u64)))
            .expect("the module holding this code");
        assert!(here.eh_frame_hdr.is_some() && here.eh_frame.is_some());
        assert!(modules.iter().any(|m| m.path.contains("libc.so")));
    }
}
