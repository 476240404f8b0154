//! A live allocation and the key views group allocations by.

use vramtrace_schema::{Api, Kind};

/// Memory that is live: allocated and not yet freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub addr: u64,
    pub size: u64,
    pub api: Api,
    pub dev: i32,
    /// Time of the allocation (ns since the process's trace start).
    pub t: u64,
    pub tid: u32,
    pub stack: u64,
}

impl Block {
    pub fn kind(&self) -> Kind {
        self.api.kind()
    }

    pub fn key(&self) -> GroupKey {
        GroupKey {
            api: self.api,
            stack: self.stack,
        }
    }
}

/// Who allocated: the API and the call stack (0 when stacks were not recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    pub api: Api,
    pub stack: u64,
}
