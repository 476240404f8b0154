//! The allocator annotations of `include/vramtrace.h`: an allocator says which blocks it
//! hands out inside the memory it reserved, so the trace has the allocated layer too.
#![allow(clippy::missing_safety_doc)]

use crate::hooks::Call;
use crate::stack::here;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Mutex, MutexGuard};
use vramtrace_schema::Api;

/// Marker names, interned: an event carries the index (`handle`), the writer writes each
/// name once as a name record.
/// (id by name, names in id order).
type Names = (HashMap<String, u64>, Vec<String>);

static NAMES: Mutex<Option<Names>> = Mutex::new(None);

/// The names' lock, held across a fork by the forking thread: a child forked while
/// another thread was interning a name inherited the lock taken, and its writer waited
/// for it forever.
pub struct ForkHold(#[allow(dead_code)] MutexGuard<'static, Option<Names>>);

pub fn hold_for_fork() -> ForkHold {
    ForkHold(NAMES.lock().unwrap_or_else(|e| e.into_inner()))
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn vramtrace_block_alloc(
    addr: u64,
    size: u64,
    requested: u64,
    device: c_int,
    stream: *mut c_void,
) {
    Call::enter(here!()).finish(Api::VramtraceBlockAlloc, 0, |e| {
        e.dev = device;
        e.addr = addr;
        e.size = size;
        e.requested = Some(requested);
        e.stream = Some(stream as u64);
    });
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn vramtrace_block_free(addr: u64, device: c_int, stream: *mut c_void) {
    let call = Call::enter(here!());
    call.finish(Api::VramtraceBlockFree, 0, |e| {
        e.dev = device;
        e.addr = addr;
        e.stream = Some(stream as u64);
    });
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn vramtrace_marker(name: *const c_char) {
    if name.is_null() {
        return;
    }
    let name = CStr::from_ptr(name).to_string_lossy().into_owned();
    let id = {
        let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        let (index, list) = names.get_or_insert_with(Default::default);
        *index.entry(name.clone()).or_insert_with(|| {
            list.push(name);
            list.len() as u64
        })
    };
    Call::enter(here!()).finish(Api::VramtraceMarker, 0, |e| e.handle = Some(id));
}

/// Names with an id above `written`, for the writer: `(id, name)`.
pub fn names_after(written: u64) -> Vec<(u64, String)> {
    let names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let Some((_, list)) = names.as_ref() else {
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .skip(written as usize)
        .map(|(i, n)| (i as u64 + 1, n.clone()))
        .collect()
}
