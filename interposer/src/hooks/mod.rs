//! The wrappers handed out in place of CUDA's memory functions.
//!
//! Every wrapper has the exact signature of one exported CUDA symbol and follows one
//! shape: find the real function, enter the guard, make the real call, record, return the
//! real result unchanged (adding one: docs/architecture.md, "Adding a hooked CUDA
//! function"). Results are kept as raw integers (not cudarc's `CUresult`
//! enum): a code a newer driver adds must pass through, not become undefined behaviour.

// Each exported function's safety contract is that of the C function it stands in for.
#![allow(clippy::missing_safety_doc)]

mod call;
mod device;
mod lookup;
mod memory;
mod mempool;
mod pool;
pub mod runtime;
mod vm;

pub use call::Call;
pub use mempool::{cudaMemGetDefaultMemPool, cudaMemGetMemPool};

/// Driver wrappers, by the module that groups them.
pub mod driver {
    pub use super::lookup::{cuGetProcAddress, cuGetProcAddress_v2};
    pub use super::memory::*;
    pub use super::mempool::{cuMemGetDefaultMemPool, cuMemGetMemPool};
    pub use super::pool::*;
    pub use super::vm::*;
}

/// `CUDA_ERROR_NOT_INITIALIZED`, returned only when no library defines the real function
/// (the wrapper was reached without a CUDA library loaded).
pub const CUDA_ERROR_NOT_INITIALIZED: i32 = 3;
/// `cudaErrorInitializationError`, the runtime's equivalent.
pub const CUDA_ERROR_INITIALIZATION: i32 = 3;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;

/// The real function behind the wrapper named `$slot`, typed as that wrapper is, or
/// `None`: `real!(cuMemAlloc_v2(_, _))`. The C signature is written once, on the
/// wrapper; the underscores only give its arity, and the compiler takes the rest from it.
macro_rules! real {
    ($slot:ident($($arg:tt),* $(,)?)) => {{
        let p = $crate::symbols::real($crate::symbols::Slot::$slot);
        let wrapper = $slot as unsafe extern "C" fn($($arg),*) -> _;
        // SAFETY: the slot holds 0 or the address of exactly this symbol (checked by
        // name when it was adopted), whose C signature is the wrapper's.
        unsafe { $crate::hooks::typed_like(wrapper, p) }
    }};
}
pub(crate) use real;

/// A wrapper of the common shape, declared once: the symbol's C signature, what it
/// returns when no library defines the real function, the API it records, and how the
/// event is filled from the arguments and the real result `r`:
///
/// ```ignore
/// hook! {
///     fn cuMemFree_v2(dptr: CUdeviceptr) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
///     Api::CuMemFree_v2, |r, e| e.addr = dptr
/// }
/// ```
///
/// It finds the real function, enters the guard, makes the real call, records, and
/// returns the real result unchanged. A wrapper with logic of its own is written out with
/// [`real!`].
macro_rules! hook {
    (
        $(#[$attr:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> c_int, or $missing:expr;
        $api:expr, |$r:ident, $e:ident| $fill:expr
    ) => {
        $(#[$attr])*
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let p = $crate::symbols::real($crate::symbols::Slot::$name);
            let wrapper = $name as unsafe extern "C" fn($($ty),*) -> c_int;
            // SAFETY: the slot holds 0 or the address of exactly this symbol (checked by
            // name when it was adopted), whose C signature is the wrapper's.
            let Some(real) = (unsafe { $crate::hooks::typed_like(wrapper, p) }) else {
                return $missing;
            };
            let call = $crate::hooks::Call::enter($crate::stack::here!());
            let $r = real($($arg),*);
            call.finish($api, $r, |$e| {
                $fill;
            });
            $r
        }
    };
}
pub(crate) use hook;

/// `p` as a function pointer of `like`'s type, or `None` where it is 0.
///
/// # Safety
/// `F` is a function pointer type, and `p` is 0 or the address of a function of that
/// type.
#[inline(always)]
pub unsafe fn typed_like<F: Copy>(like: F, p: usize) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
    let _ = like;
    if p == 0 {
        None
    } else {
        Some(std::mem::transmute_copy::<usize, F>(&p))
    }
}

/// Reads an out-parameter the real call filled, only when the call succeeded (on
/// failure it may be uninitialised).
///
/// # Safety
/// `p` is null or points to a `T` the call wrote on success.
#[inline]
pub unsafe fn out<T: Copy + Default>(res: i32, p: *const T) -> T {
    if res != 0 || p.is_null() {
        T::default()
    } else {
        std::ptr::read_unaligned(p)
    }
}
