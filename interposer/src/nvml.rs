//! The device layer: what nvidia-smi shows. Once the program has loaded NVML
//! (`libnvidia-ml.so.1`), a sampler thread asks it, at a modest interval, for each
//! device's total/free memory and this process's used memory, written as `nvml_sample`
//! events. NVML needs no CUDA context and is thread-safe; nothing here touches CUDA.

use crate::{clock, guard, queue, settings};
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use vramtrace_schema::{Api, Event};

/// Set once the sampler runs, or once NVML failed to start [`MAX_STARTS`] times. Only the
/// writer thread starts it.
static STARTED: AtomicBool = AtomicBool::new(false);
static FAILED_STARTS: AtomicU32 = AtomicU32::new(0);
const MAX_STARTS: u32 = 5;
static LAST_CHECK_NS: AtomicU64 = AtomicU64::new(0);
const CHECK_INTERVAL_NS: u64 = 200_000_000;

const NVML_SUCCESS: c_int = 0;
const NVML_ERROR_INSUFFICIENT_SIZE: c_int = 7;
/// Bytes of one `nvmlProcessInfo_t` (v3: pid, used, GPU and compute instance ids)...
const PROCESS_INFO: usize = 24;
/// ...and of the longer entries some R535 drivers wrote instead.
const PROCESS_INFO_LONG: usize = 32;

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

type CountFn = unsafe extern "C" fn(*mut c_uint) -> c_int;
type HandleFn = unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_int;
type MemoryFn = unsafe extern "C" fn(*mut c_void, *mut Memory) -> c_int;
type ProcessesFn = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut c_void) -> c_int;

struct Nvml {
    count: CountFn,
    handle: HandleFn,
    memory: MemoryFn,
    processes: ProcessesFn,
}

/// From the writer thread: starts the sampler once NVML is loaded.
pub fn poll() {
    if STARTED.load(Ordering::Relaxed) || settings::get().nvml_ms == 0 {
        return;
    }
    let now = clock::monotonic_ns();
    // After a failed start, a longer wait each time: 5 tries cover about 6 s.
    let wait = CHECK_INTERVAL_NS << FAILED_STARTS.load(Ordering::Relaxed);
    if now.saturating_sub(LAST_CHECK_NS.load(Ordering::Relaxed)) < wait {
        return;
    }
    LAST_CHECK_NS.store(now, Ordering::Relaxed);
    // Asked of the loader's list first: `dlopen` of a name that is not loaded opens the
    // files of that name on the library path, on this thread, in the program's
    // descriptor table (docs/host.md, "vramtrace's own reads"), every 200 ms.
    if !crate::stack::modules::any_named(b"libnvidia-ml.so") {
        return;
    }
    // SAFETY: RTLD_NOLOAD never loads anything: it asks whether the program did.
    let handle = unsafe {
        libc::dlopen(
            c"libnvidia-ml.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        )
    };
    if handle.is_null() {
        return;
    }
    // The reference dlopen took is kept, whatever follows: given back here, it could be
    // the last one (the program may have closed NVML meanwhile), and NVML would be
    // unloaded on this thread, behind the dlclose bookkeeping of the stack walker.
    let Some(nvml) = resolve(handle) else {
        // nvmlInit can fail while the driver is still coming up: asked again later, a few
        // times.
        if FAILED_STARTS.fetch_add(1, Ordering::Relaxed) + 1 >= MAX_STARTS {
            STARTED.store(true, Ordering::Relaxed);
        }
        return;
    };
    STARTED.store(true, Ordering::Relaxed);
    let interval = Duration::from_millis(settings::get().nvml_ms);
    let _ = crate::thread::spawn("vramtrace-nvml", move || sample_forever(nvml, interval));
}

/// A forked child has no sampler thread.
pub fn after_fork_child() {
    STARTED.store(false, Ordering::Relaxed);
    FAILED_STARTS.store(0, Ordering::Relaxed);
}

fn resolve(handle: *mut c_void) -> Option<Nvml> {
    let find = |name: &CStr| {
        // SAFETY: lookup in NVML's own handle.
        let p = unsafe { crate::dlsym::real_dlsym(handle, name.as_ptr()) } as usize;
        (p != 0).then_some(p)
    };
    let init = find(c"nvmlInit_v2")?;
    // SAFETY: each address is NVML's function of exactly this signature.
    unsafe {
        let init = std::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(init);
        if init() != NVML_SUCCESS {
            return None;
        }
        Some(Nvml {
            count: std::mem::transmute::<usize, CountFn>(find(c"nvmlDeviceGetCount_v2")?),
            handle: std::mem::transmute::<usize, HandleFn>(find(c"nvmlDeviceGetHandleByIndex_v2")?),
            memory: std::mem::transmute::<usize, MemoryFn>(find(c"nvmlDeviceGetMemoryInfo")?),
            processes: std::mem::transmute::<usize, ProcessesFn>(find(
                c"nvmlDeviceGetComputeRunningProcesses_v3",
            )?),
        })
    }
}

fn sample_forever(nvml: Nvml, interval: Duration) {
    let tid = guard::tid();
    loop {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sample(&nvml, tid)));
        std::thread::sleep(interval);
    }
}

fn sample(nvml: &Nvml, tid: u32) {
    let mut count: c_uint = 0;
    // SAFETY: NVML calls with valid out-pointers.
    if unsafe { (nvml.count)(&mut count) } != NVML_SUCCESS {
        return;
    }
    for index in 0..count {
        let mut device = std::ptr::null_mut();
        let mut memory = Memory::default();
        // SAFETY: as above.
        unsafe {
            if (nvml.handle)(index, &mut device) != NVML_SUCCESS
                || (nvml.memory)(device, &mut memory) != NVML_SUCCESS
            {
                continue;
            }
        }
        let mine = process_used(nvml, device);
        let mut e = Event::new(
            clock::now(),
            tid,
            index as i32,
            Api::NvmlSample,
            if mine.is_some() { 0 } else { 1 },
        );
        e.size = mine.unwrap_or(0);
        e.free = Some(memory.free);
        e.total = Some(memory.total);
        queue::push(tid, e, &[], 0);
    }
}

/// This process's used memory on `device`, or `None` when NVML does not list this pid
/// (in a container NVML reports host pids).
fn process_used(nvml: &Nvml, device: *mut c_void) -> Option<u64> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut capacity: c_uint = 0;
    // The list can grow between asking its size and reading it: ask again.
    for _ in 0..4 {
        let mut buffer = vec![0u8; capacity as usize * PROCESS_INFO_LONG + PROCESS_INFO_LONG];
        let mut count = capacity;
        // SAFETY: the buffer holds `capacity` entries of the longest known stride.
        let r = unsafe { (nvml.processes)(device, &mut count, buffer.as_mut_ptr().cast()) };
        if r == NVML_ERROR_INSUFFICIENT_SIZE {
            capacity = count + 4;
            continue;
        }
        if r != NVML_SUCCESS {
            return None;
        }
        return find_pid(&buffer, count as usize, pid);
    }
    None
}

/// Finds `pid` among `count` entries, trying the v3 stride first, then the longer one.
fn find_pid(buffer: &[u8], count: usize, pid: u32) -> Option<u64> {
    for stride in [PROCESS_INFO, PROCESS_INFO_LONG] {
        for i in 0..count {
            let at = i * stride;
            let Some(entry) = buffer.get(at..at + 16) else {
                break;
            };
            let entry_pid = u32::from_ne_bytes(entry[0..4].try_into().ok()?);
            if entry_pid == pid {
                return Some(u64::from_ne_bytes(entry[8..16].try_into().ok()?));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(stride: usize, list: &[(u32, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; stride * list.len() + 32];
        for (i, (pid, used)) in list.iter().enumerate() {
            b[i * stride..i * stride + 4].copy_from_slice(&pid.to_ne_bytes());
            b[i * stride + 8..i * stride + 16].copy_from_slice(&used.to_ne_bytes());
        }
        b
    }

    #[test]
    fn pids_are_found_at_either_stride() {
        let list = [(100, 1 << 20), (4242, 3 << 30), (7, 5)];
        assert_eq!(find_pid(&entries(24, &list), 3, 4242), Some(3 << 30));
        assert_eq!(find_pid(&entries(32, &list), 3, 4242), Some(3 << 30));
        assert_eq!(find_pid(&entries(24, &list), 3, 999), None);
    }
}
