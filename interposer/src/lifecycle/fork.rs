//! `fork`: the forking thread holds every lock of vramtrace's across the fork, so that
//! the child never inherits one half-way through a write, a push, a walk or a scan; the
//! child starts a trace of its own.

use crate::{clock, guard, queue, settings, warn, writer};
use std::cell::RefCell;
use std::sync::MutexGuard;

/// Every lock the forking thread holds across a fork, in the order they are taken.
/// Dropping it releases them all.
struct Held {
    writer: writer::Locked,
    _names: crate::annotate::ForkHold,
    _codes: crate::stack::python::ForkHold,
    queue: queue::ForkHold,
    _stacks: crate::stack::capture::ForkHold,
    _modules: crate::stack::modules::ForkHold,
    wake: MutexGuard<'static, bool>,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

pub(super) fn install() {
    // SAFETY: plain function pointers with the expected signatures.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        );
    }
}

extern "C" fn before_fork() {
    // The first use of the thread-local that holds the guards registers its destructor,
    // which takes the loader's lock: done before any lock is taken (a thread in dlopen
    // holding the loader's lock may be waiting for ours).
    let _ = HELD.try_with(|_| ());
    let held = Held {
        writer: writer::lock(),
        _names: crate::annotate::hold_for_fork(),
        _codes: crate::stack::python::hold_for_fork(),
        queue: queue::hold_for_fork(),
        _stacks: crate::stack::capture::hold_for_fork(),
        _modules: crate::stack::modules::hold_for_fork(),
        wake: super::writer_thread::hold_wake(),
    };
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some(held));
}

extern "C" fn after_fork_parent() {
    let _ = HELD.try_with(|h| h.borrow_mut().take());
}

/// In the child: a fresh writer with its own file, no thread until its first event.
extern "C" fn after_fork_child() {
    clock::init();
    guard::reset_tid();
    warn::reset();
    crate::dlclose::after_fork_child();
    let _ = HELD.try_with(|h| {
        if let Some(Held {
            writer: mut w,
            mut queue,
            wake: mut woken,
            ..
        }) = h.borrow_mut().take()
        {
            queue.clear();
            w.reset_in_child();
            *woken = false;
        }
    });
    super::writer_thread::after_fork_child();
    crate::thread::after_fork_child();
    super::restart_in_child();
    crate::nvml::after_fork_child();
    if !settings::get().children {
        settings::stop_recording();
    }
}
