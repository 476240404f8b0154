//! The real functions behind the hooks: one slot per hooked symbol, filled from the
//! pointer the program's own lookup returned (`dlsym`, `cuGetProcAddress`), or lazily
//! from the next library in the search order.

use crate::hooks::{driver, runtime};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Which library a hooked symbol must come from before a wrapper replaces it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lib {
    Driver,
    Runtime,
}

macro_rules! hooked {
    ($( $slot:ident: $lib:ident $path:path; )*) => {
        /// Every hooked symbol.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub enum Slot { $( $slot, )* }

        const COUNT: usize = [$( Slot::$slot, )*].len();

        static REAL: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

        static WRAPPER: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

        impl Slot {
            /// The hooked symbol with exactly this name.
            pub fn find(name: &[u8]) -> Option<Slot> {
                $( if name == stringify!($slot).as_bytes() { return Some(Slot::$slot); } )*
                None
            }

            pub fn name(self) -> &'static str {
                match self { $( Slot::$slot => stringify!($slot), )* }
            }

            pub fn lib(self) -> Lib {
                match self { $( Slot::$slot => Lib::$lib, )* }
            }

            /// The wrapper's address as Rust code sees it: the process's first definition
            /// of the name (see [`Slot::wrapper`]).
            fn linked_wrapper(self) -> usize {
                match self { $( Slot::$slot => $path as *const () as usize, )* }
            }
        }
    };
}

hooked! {
    cuGetProcAddress: Driver driver::cuGetProcAddress;
    cuGetProcAddress_v2: Driver driver::cuGetProcAddress_v2;
    cuMemAlloc_v2: Driver driver::cuMemAlloc_v2;
    cuMemAllocPitch_v2: Driver driver::cuMemAllocPitch_v2;
    cuMemFree_v2: Driver driver::cuMemFree_v2;
    cuMemAllocManaged: Driver driver::cuMemAllocManaged;
    cuMemAllocAsync: Driver driver::cuMemAllocAsync;
    cuMemAllocAsync_ptsz: Driver driver::cuMemAllocAsync_ptsz;
    cuMemAllocFromPoolAsync: Driver driver::cuMemAllocFromPoolAsync;
    cuMemAllocFromPoolAsync_ptsz: Driver driver::cuMemAllocFromPoolAsync_ptsz;
    cuMemFreeAsync: Driver driver::cuMemFreeAsync;
    cuMemFreeAsync_ptsz: Driver driver::cuMemFreeAsync_ptsz;
    cuMemPoolCreate: Driver driver::cuMemPoolCreate;
    cuMemPoolDestroy: Driver driver::cuMemPoolDestroy;
    cuMemPoolTrimTo: Driver driver::cuMemPoolTrimTo;
    cuMemGetDefaultMemPool: Driver driver::cuMemGetDefaultMemPool;
    cuMemGetMemPool: Driver driver::cuMemGetMemPool;
    cuMemAddressReserve: Driver driver::cuMemAddressReserve;
    cuMemAddressFree: Driver driver::cuMemAddressFree;
    cuMemCreate: Driver driver::cuMemCreate;
    cuMemRelease: Driver driver::cuMemRelease;
    cuMemMap: Driver driver::cuMemMap;
    cuMemUnmap: Driver driver::cuMemUnmap;
    cuMemSetAccess: Driver driver::cuMemSetAccess;
    cuMemHostAlloc: Driver driver::cuMemHostAlloc;
    cuMemAllocHost_v2: Driver driver::cuMemAllocHost_v2;
    cuMemFreeHost: Driver driver::cuMemFreeHost;
    cuMemHostRegister_v2: Driver driver::cuMemHostRegister_v2;
    cuMemHostUnregister: Driver driver::cuMemHostUnregister;
    cuArrayCreate_v2: Driver driver::cuArrayCreate_v2;
    cuArray3DCreate_v2: Driver driver::cuArray3DCreate_v2;
    cuArrayDestroy: Driver driver::cuArrayDestroy;
    cuMemGetInfo_v2: Driver driver::cuMemGetInfo_v2;
    cudaMalloc: Runtime runtime::cudaMalloc;
    cudaMallocPitch: Runtime runtime::cudaMallocPitch;
    cudaFree: Runtime runtime::cudaFree;
    cudaMallocManaged: Runtime runtime::cudaMallocManaged;
    cudaMallocAsync: Runtime runtime::cudaMallocAsync;
    cudaMallocFromPoolAsync: Runtime runtime::cudaMallocFromPoolAsync;
    cudaFreeAsync: Runtime runtime::cudaFreeAsync;
    cudaMemPoolCreate: Runtime runtime::cudaMemPoolCreate;
    cudaMemPoolDestroy: Runtime runtime::cudaMemPoolDestroy;
    cudaMemPoolTrimTo: Runtime runtime::cudaMemPoolTrimTo;
    cudaMemGetDefaultMemPool: Runtime crate::hooks::cudaMemGetDefaultMemPool;
    cudaMemGetMemPool: Runtime crate::hooks::cudaMemGetMemPool;
    cudaMallocHost: Runtime runtime::cudaMallocHost;
    cudaHostAlloc: Runtime runtime::cudaHostAlloc;
    cudaFreeHost: Runtime runtime::cudaFreeHost;
    cudaMemGetInfo: Runtime runtime::cudaMemGetInfo;
    cudaGetDriverEntryPoint: Runtime runtime::cudaGetDriverEntryPoint;
    cudaGetDriverEntryPoint_ptsz: Runtime runtime::cudaGetDriverEntryPoint_ptsz;
    cudaGetDriverEntryPointByVersion: Runtime runtime::cudaGetDriverEntryPointByVersion;
    cudaGetDriverEntryPointByVersion_ptsz: Runtime runtime::cudaGetDriverEntryPointByVersion_ptsz;
}

impl Slot {
    /// Address of vramtrace's own wrapper for this symbol, read from this library's symbol
    /// table: with a layer preloaded before vramtrace that exports the same name, the
    /// address Rust code takes is the layer's function, and handing that out would make
    /// the layer call itself.
    pub fn wrapper(self) -> usize {
        let w = WRAPPER[self as usize].load(Ordering::Acquire);
        if w != 0 {
            return w;
        }
        let w = crate::elf_symbols::own(self.name().as_bytes()).unwrap_or(self.linked_wrapper());
        WRAPPER[self as usize].store(w, Ordering::Release);
        w
    }
}

/// The real function for `slot`, or 0 when no library provides it.
#[inline]
pub fn real(slot: Slot) -> usize {
    let p = REAL[slot as usize].load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    resolve_next(slot)
}

/// A program linked with `-lcuda`/`-lcudart` calls the exported wrapper directly: its real
/// function is the next definition after this library - CUDA's own, or that of another
/// layer preloaded after vramtrace (which must still see the call).
#[cold]
fn resolve_next(slot: Slot) -> usize {
    let Ok(name) = std::ffi::CString::new(slot.name()) else {
        return 0;
    };
    // SAFETY: RTLD_NEXT from this library's own code: the definition after ours.
    let p = unsafe { crate::dlsym::real_dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    match locate(p) {
        Some(l) if !l.is_ours() => {
            adopt(slot, p, &l);
            REAL[slot as usize].load(Ordering::Acquire)
        }
        _ => 0,
    }
}

/// Records `p` (located at `l`) as the real function for `slot`. Returns false when the
/// slot already holds another function (a second copy of libcudart, say): the wrapper
/// would call the wrong one, so that pointer is handed back unwrapped.
fn adopt(slot: Slot, p: usize, l: &Location) -> bool {
    let adopted =
        match REAL[slot as usize].compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(existing) => existing == p,
        };
    // Also when another thread adopted the same pointer first: it may not have published
    // it yet, and this thread's call would find no driver to ask for its device.
    if adopted && slot.lib() == Lib::Driver {
        if l.is_from(Lib::Driver) {
            DRIVER_SEEN.store(p, Ordering::Release);
        } else {
            find_driver_behind_layer();
        }
    }
    adopted
}

/// Any real driver function seen: tells where libcuda lives (for `cuCtxGetDevice`).
static DRIVER_SEEN: AtomicUsize = AtomicUsize::new(0);

/// When another layer stands in for every driver function vramtrace adopts, no pointer
/// into libcuda is ever seen: ask the loader for one (libcuda is loaded by then - the
/// layer's function came from a lookup in it).
#[cold]
fn find_driver_behind_layer() {
    if DRIVER_SEEN.load(Ordering::Acquire) != 0 {
        return;
    }
    // SAFETY: RTLD_NOLOAD only returns a handle to a library already loaded.
    let handle =
        unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return;
    }
    // SAFETY: valid handle and name; glibc's own lookup, not another layer's.
    let p = unsafe { crate::dlsym::real_dlsym(handle, c"cuGetProcAddress".as_ptr()) } as usize;
    // SAFETY: balances the reference dlopen took.
    unsafe { crate::dlclose::real_dlclose(handle) };
    if locate(p).is_some_and(|l| l.is_from(Lib::Driver)) {
        DRIVER_SEEN.store(p, Ordering::Release);
    }
}

pub fn driver_function_seen() -> usize {
    DRIVER_SEEN.load(Ordering::Acquire)
}

/// What `dladdr` says of an address.
pub struct Location {
    /// The exported symbol exactly at this address, if any.
    pub symbol: Option<&'static CStr>,
    /// Path of the library that contains it.
    pub file: Option<&'static CStr>,
    pub base: usize,
}

/// Where `p` is; `None` for 0 and for an address in no loaded module.
pub fn locate(p: usize) -> Option<Location> {
    if p == 0 {
        return None;
    }
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads loader tables; info is a valid out-pointer.
    if unsafe { libc::dladdr(p as *const c_void, &mut info) } == 0 {
        return None;
    }
    // SAFETY: dladdr's strings live as long as the library stays loaded; CUDA libraries
    // are never unloaded while in use.
    let cstr = |s: *const c_char| (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) });
    Some(Location {
        symbol: if info.dli_saddr as usize == p {
            cstr(info.dli_sname)
        } else {
            None
        },
        file: cstr(info.dli_fname),
        base: info.dli_fbase as usize,
    })
}

fn our_base() -> usize {
    static BASE: AtomicUsize = AtomicUsize::new(0);
    let b = BASE.load(Ordering::Relaxed);
    if b != 0 {
        return b;
    }
    let b = locate(our_base as *const () as usize)
        .map(|l| l.base)
        .unwrap_or(0);
    BASE.store(b, Ordering::Relaxed);
    b
}

impl Location {
    /// Whether it is inside this library (one of our own wrappers).
    pub fn is_ours(&self) -> bool {
        self.base == our_base()
    }

    /// Whether its library is NVIDIA's driver (`libcuda.so*`) or runtime (`libcudart.so*`).
    /// Only those get wrapped: a loose `cu` prefix once caught `cudnnCreate`.
    pub fn is_from(&self, lib: Lib) -> bool {
        let Some(file) = self.file else {
            return false;
        };
        let path = file.to_bytes();
        let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        match lib {
            Lib::Driver => base.starts_with(b"libcuda.so"),
            Lib::Runtime => base.starts_with(b"libcudart.so"),
        }
    }
}

/// The wrapper to hand out instead of `p`, the real function for `slot`: `p` is that
/// function of CUDA's library, or another layer's function standing in for it (the
/// caller asked for exactly this symbol, so it calls `p` with this ABI). `l` is where `p`
/// is: one `dladdr` (which takes the loader's lock) answers every question about it.
/// Never one of our own wrappers: each call is wrapped once.
pub fn wrap_at(slot: Slot, p: usize, l: &Location) -> usize {
    if l.is_ours() || !adopt(slot, p, l) {
        return p;
    }
    slot.wrapper()
}

/// For a pointer from `cuGetProcAddress` or `cudaGetDriverEntryPoint`: which variant it
/// is (`cuMemAlloc_v2` or the 32-bit `cuMemAlloc`) decides whether a wrapper of exactly
/// that ABI exists. In CUDA's library the exported symbol at that address says it;
/// without one, and for another layer's function (whose name proves nothing: it may hand
/// out one function for several versions), the version table of `procaddr` says which
/// ABI the caller expects for what it asked.
pub fn wrap_looked_up(requested: &[u8], version: i32, flags: u64, p: usize) -> usize {
    let Some(l) = locate(p) else {
        return p;
    };
    if l.is_ours() {
        return p;
    }
    let variant = || crate::procaddr::variant(requested, version, flags);
    let slot = if l.is_from(Lib::Driver) || l.is_from(Lib::Runtime) {
        match l.symbol {
            Some(symbol) => Slot::find(symbol.to_bytes()),
            None if l.is_from(Lib::Driver) => variant(),
            None => None,
        }
    } else {
        variant()
    };
    match slot {
        Some(slot) => wrap_at(slot, p, &l),
        None => p,
    }
}
