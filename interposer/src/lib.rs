//! `libvramtrace.so`: loaded with `LD_PRELOAD`, it records every device-memory
//! allocation and free a CUDA program makes, at the runtime and driver level, into a
//! trace file (format: `docs/trace-format.md`).
//!
//! How calls are caught (see `../shared/design/cuda-interception.md`): the runtime never
//! binds driver symbols by name; it `dlsym`s `cuGetProcAddress_v2` and asks it for
//! everything. So the interposer overrides `dlsym` ([`dlsym`](mod@dlsym)), wraps the
//! lookup functions ([`procaddr`]) and hands out its own wrappers ([`hooks`]) wherever a
//! looked-up pointer is exactly a memory function it knows.
//!
//! The hot path of a hook ([`hooks::call`]): a thread-local guard, the real call, a
//! timestamp, a fixed-size record pushed into a sharded queue ([`queue`]). The
//! [`writer`] formats and writes, on its own thread ([`lifecycle::writer_thread`]) or, as
//! the process ends, on the thread that ends it ([`lifecycle`]). Nothing here may panic across the C boundary or
//! change what a call returns.

pub mod annotate;
pub mod bound;
pub mod clock;
pub mod dlclose;
pub mod dlsym;
pub mod dlvsym;
pub mod elf_symbols;
pub mod flush;
pub mod guard;
pub mod hooks;
pub mod last_thread;
pub mod lifecycle;
pub mod nvml;
pub mod output;
pub mod own_files;
pub mod pool_locations;
pub mod procaddr;
pub mod queue;
pub mod queued;
pub mod settings;
pub mod stack;
pub mod symbols;
pub mod thread;
pub mod trace_fd;
pub mod trace_file;
pub mod warn;
pub mod writer;

/// Runs when the library is loaded, before `main`: reads the settings once and starts
/// the process's [`lifecycle`] (fork, exit and crash handlers). Nothing CUDA-related
/// happens here.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(|| {
        settings::init();
        clock::init();
        lifecycle::start();
    });
}

/// Runs last at exit (`_dl_fini`, after the destructors of libraries loaded later, such
/// as the CUDA runtime), so frees made during their teardown are still recorded.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn on_unload() {
    let _ = std::panic::catch_unwind(|| lifecycle::finish("exit"));
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

#[cfg(not(test))]
#[used]
#[link_section = ".fini_array"]
static ON_UNLOAD: extern "C" fn() = on_unload;
