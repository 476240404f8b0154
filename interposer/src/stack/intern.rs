//! Identical stacks are written once: a trie of (caller node, return address) nodes, as
//! heaptrack does. An event carries the id of its innermost node; a stack is read back
//! by following `parent` links to the root (id 0).

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};
use std::hash::{Hash, Hasher};

/// FxHash: every frame of every event is looked up here, on the writer thread; the keys
/// are addresses and ids, where SipHash's resistance to chosen keys buys nothing.
///
/// A program allocates from a few places over and over, so whole stacks are looked up
/// first, by a hash of all their addresses, and checked against the trie: one lookup per
/// event instead of one per frame.
#[derive(Default)]
pub struct Interner {
    nodes: FxHashMap<(u64, u64), u64>,
    /// Innermost node of a stack and its addresses, by the hash of its addresses: a cache
    /// (emptied when it holds [`WHOLE_LIMIT`] stacks), checked by comparing the addresses.
    whole: FxHashMap<u64, (u64, Box<[u64]>)>,
    ips: FxHashSet<u64>,
}

/// Native addresses fit in 48 bits; above them, once a library was unloaded, the frames of
/// later stacks carry how many `dlclose` calls came before (saturating), so that an address
/// another library was loaded at is another frame in the trace. Python frames (bit 63)
/// have their own numbering and are left as they are.
const EPOCH_SHIFT: u32 = 48;
const MAX_EPOCH: u64 = (1 << 15) - 1;
use super::python::PYTHON_BIT;

/// `ip` as the trace records it after `epoch` unloads.
pub fn tagged(ip: u64, epoch: u64) -> u64 {
    if ip & PYTHON_BIT != 0 || epoch == 0 {
        ip
    } else {
        ip | (epoch.min(MAX_EPOCH) << EPOCH_SHIFT)
    }
}

/// Whether a recorded `ip` is a Python frame.
pub fn is_python(ip: u64) -> bool {
    ip & PYTHON_BIT != 0
}

/// The return address a recorded `ip` stands for.
pub fn address(ip: u64) -> u64 {
    if ip & PYTHON_BIT != 0 {
        ip
    } else {
        ip & ((1 << EPOCH_SHIFT) - 1)
    }
}

/// Stacks the whole-stack cache holds at most.
const WHOLE_LIMIT: usize = 1 << 16;

/// A node the trace does not have yet, to be written before the event that uses it.
pub struct NewNode {
    pub id: u64,
    pub parent: u64,
    pub ip: u64,
    /// The first node with this address: its frame record must be written too.
    pub new_ip: bool,
}

impl Interner {
    /// The id of the stack `ips` (innermost first); `each` gets every node created.
    pub fn intern(&mut self, ips: &[u64], mut each: impl FnMut(NewNode)) -> u64 {
        let key = {
            let mut h = FxHasher::default();
            ips.hash(&mut h);
            h.finish()
        };
        if let Some((id, known)) = self.whole.get(&key) {
            if **known == *ips {
                return *id;
            }
        }
        let mut parent = 0;
        for &ip in ips.iter().rev() {
            let next = self.nodes.len() as u64 + 1;
            let id = *self.nodes.entry((parent, ip)).or_insert(next);
            if id == next {
                let new_ip = self.ips.insert(ip);
                each(NewNode {
                    id,
                    parent,
                    ip,
                    new_ip,
                });
            }
            parent = id;
        }
        if self.whole.len() >= WHOLE_LIMIT {
            self.whole.clear();
        }
        self.whole.insert(key, (parent, ips.into()));
        parent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_set_native_addresses_apart_and_leave_python_frames() {
        let ip = 0x7f12_3456_7890;
        assert_eq!(tagged(ip, 0), ip);
        assert_ne!(tagged(ip, 1), tagged(ip, 2));
        assert_eq!(address(tagged(ip, 3)), ip);
        assert_eq!(address(tagged(ip, u64::MAX)), ip);
        assert_eq!(tagged(ip, u64::MAX) & PYTHON_BIT, 0);
        let python = PYTHON_BIT | 77;
        assert_eq!((tagged(python, 5), address(python)), (python, python));
    }

    #[test]
    fn shared_callers_are_one_node_each() {
        let mut trie = Interner::default();
        let mut created = Vec::new();
        // main(0x10) -> a(0x20) -> alloc(0x30), then main -> b(0x21) -> alloc(0x30)
        let s1 = trie.intern(&[0x30, 0x20, 0x10], |n| {
            created.push((n.id, n.parent, n.ip, n.new_ip))
        });
        let s2 = trie.intern(&[0x30, 0x21, 0x10], |n| {
            created.push((n.id, n.parent, n.ip, n.new_ip))
        });
        let again = trie.intern(&[0x30, 0x20, 0x10], |_| panic!("nothing new"));
        assert_eq!((s1, s2, again), (3, 5, 3));
        // A stack that is a suffix or prefix of a known one is its own node.
        assert_eq!(trie.intern(&[0x20, 0x10], |_| panic!("nothing new")), 2);
        // A new outermost caller: four new nodes.
        assert_eq!(trie.intern(&[0x30, 0x20, 0x10, 0x5], |_| {}), 9);
        assert_eq!(trie.intern(&[], |_| panic!("nothing new")), 0);
        assert_eq!(
            created,
            vec![
                (1, 0, 0x10, true),
                (2, 1, 0x20, true),
                (3, 2, 0x30, true),
                (4, 1, 0x21, true),
                (5, 4, 0x30, false)
            ]
        );
    }
}
