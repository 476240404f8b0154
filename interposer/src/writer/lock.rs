//! Holding the writer: one mutex, and a per-thread flag saying this thread holds it (a
//! signal handler that ends the process from inside a write must not wait for it).

use super::{Writer, WRITER};
use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::sync::MutexGuard;

thread_local! {
    /// Whether this thread holds the writer: a signal handler that ends the process from
    /// inside a write must not wait for the write it interrupted.
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// The writer, held by this thread.
pub struct Locked(ManuallyDrop<MutexGuard<'static, Writer>>);

impl Locked {
    fn new(guard: MutexGuard<'static, Writer>) -> Locked {
        let _ = HOLDING.try_with(|h| h.set(true));
        Locked(ManuallyDrop::new(guard))
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // Unlocked first: until then, a handler on this thread must still see it held.
        // SAFETY: the guard is dropped once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.0) };
        let _ = HOLDING.try_with(|h| h.set(false));
    }
}

impl std::ops::Deref for Locked {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.0
    }
}

impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.0
    }
}

/// Whether this thread holds the writer.
pub fn holding() -> bool {
    HOLDING.try_with(Cell::get).unwrap_or(false)
}

/// The writer; a panic while it was held (none is expected) does not make it unusable.
pub fn lock() -> Locked {
    Locked::new(WRITER.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The writer if nobody holds it right now.
pub fn try_lock() -> Option<Locked> {
    match WRITER.try_lock() {
        Ok(g) => Some(Locked::new(g)),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(Locked::new(e.into_inner())),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}
