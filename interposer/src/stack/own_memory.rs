//! Reads of this process's own memory that fail instead of faulting: `process_vm_readv` on
//! the process itself, which checks every range and answers EFAULT where a plain load
//! would be a SIGSEGV in the traced program.

use std::ffi::c_void;

/// This process, as `process_vm_readv` names it. Taken per use, not kept: after a fork
/// the same address means the child's memory only under the child's pid.
pub struct OwnMemory(libc::pid_t);

/// Ranges one call reads at most (the kernel's `UIO_MAXIOV`).
const MAX_RANGES: usize = 1024;

impl OwnMemory {
    pub fn now() -> OwnMemory {
        // SAFETY: no arguments, cannot fail.
        OwnMemory(unsafe { libc::getpid() })
    }

    /// Fills `buf` from `addr`: false where any of it is not mapped readable.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        buf.is_empty() || self.read_each(&[addr], buf)
    }

    pub fn word(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| u64::from_le_bytes(b))
    }

    /// Fills `buf`'s equal parts, one per address, in one call: false unless every part
    /// was read whole.
    pub fn read_each(&self, addrs: &[u64], buf: &mut [u8]) -> bool {
        if addrs.is_empty() || addrs.len() > MAX_RANGES || !buf.len().is_multiple_of(addrs.len()) {
            return addrs.is_empty();
        }
        let size = buf.len() / addrs.len();
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote: Vec<libc::iovec> = addrs
            .iter()
            .map(|&a| libc::iovec {
                iov_base: a as *mut c_void,
                iov_len: size,
            })
            .collect();
        // SAFETY: the kernel writes at most buf.len() bytes into buf, and checks the
        // remote ranges itself.
        let n = unsafe {
            libc::process_vm_readv(self.0, &local, 1, remote.as_ptr(), remote.len() as _, 0)
        };
        n == buf.len() as isize
    }

    /// The readable bytes just below `hi`, at most `max` of them, in one call: (their
    /// start, the bytes). Read a page at a time downward, so that an unmapped page below
    /// ends the range instead of failing the read.
    pub fn read_below(&self, hi: u64, max: usize) -> (u64, Vec<u8>) {
        const PAGE: u64 = 4096;
        let start = hi.saturating_sub(max as u64);
        let total = (hi - start) as usize;
        let mut buf = vec![0u8; total];
        let (mut local, mut remote) = (Vec::new(), Vec::new());
        let mut end = hi;
        while end > start && remote.len() < MAX_RANGES {
            let from = ((end - 1) & !(PAGE - 1)).max(start);
            let len = (end - from) as usize;
            remote.push(libc::iovec {
                iov_base: from as *mut c_void,
                iov_len: len,
            });
            local.push(libc::iovec {
                // SAFETY: from..end lies within start..hi, which buf covers.
                iov_base: unsafe { buf.as_mut_ptr().add((from - start) as usize) }.cast(),
                iov_len: len,
            });
            end = from;
        }
        // SAFETY: each local range lies in buf; the kernel checks the remote ranges, and
        // stops at the first one that cannot be read whole.
        let n = unsafe {
            libc::process_vm_readv(
                self.0,
                local.as_ptr(),
                local.len() as _,
                remote.as_ptr(),
                remote.len() as _,
                0,
            )
        };
        let n = n.max(0) as usize;
        (hi - n as u64, buf.split_off(total - n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_of_unmapped_memory_fail_without_a_fault() {
        let mem = OwnMemory::now();
        let (a, b) = ([7u8; 16], [9u8; 16]);
        let mut buf = [0u8; 16];
        assert!(mem.read(a.as_ptr() as u64, &mut buf));
        assert_eq!(buf, a);
        assert!(!mem.read(8, &mut buf));
        assert!(!mem.read(u64::MAX - 4, &mut buf));
        let mut both = [0u8; 32];
        assert!(mem.read_each(&[b.as_ptr() as u64, a.as_ptr() as u64], &mut both));
        assert_eq!((&both[..16], &both[16..]), (&b[..], &a[..]));
        assert!(!mem.read_each(&[b.as_ptr() as u64, 8], &mut both));
    }

    #[test]
    fn a_read_below_stops_at_the_first_unmapped_page() {
        let mem = OwnMemory::now();
        // Three pages, the first unmapped: a read of 3 pages below the end gets two.
        // SAFETY: a fresh private mapping, unmapped at the end.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                3 * 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            ) as *mut u8;
            assert!(p as isize != -1);
            std::ptr::write_bytes(p, 5, 3 * 4096);
            *p.add(3 * 4096 - 1) = 9;
            libc::munmap(p.cast(), 4096);
            let hi = p as u64 + 3 * 4096;
            let (lo, bytes) = mem.read_below(hi - 100, 3 * 4096);
            assert_eq!(lo, p as u64 + 4096);
            assert_eq!(bytes.len(), 2 * 4096 - 100);
            assert!(bytes.iter().all(|&b| b == 5));
            let (lo, bytes) = mem.read_below(hi, 10);
            assert_eq!((lo, bytes.len(), bytes[9]), (hi - 10, 10, 9));
            libc::munmap(p.add(4096).cast(), 2 * 4096);
        }
    }
}
