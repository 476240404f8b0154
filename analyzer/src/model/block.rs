//! A live allocation and the key views group allocations by.

use vramtrace_schema::{Api, Kind, Location};

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
    /// The kind of memory: the API's, or host / managed pool by the event's location.
    pub kind: Kind,
    /// Where the event said the memory lives (`Device` unless it said).
    pub loc: Location,
    /// The category the program named for it (a range open on the allocating thread).
    pub category: Option<super::Category>,
}

impl Block {
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Where memory that is not device memory lives; `None` for device memory.
    pub fn off_device(&self) -> Option<Location> {
        self.loc.off_device(self.kind)
    }

    pub fn key(&self) -> GroupKey {
        GroupKey {
            api: self.api,
            stack: self.stack,
            category: self.category,
        }
    }
}

/// Who allocated: the API and the call stack (0 when stacks were not recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    pub api: Api,
    pub stack: u64,
    /// The category the program named for it (a category range open when it was
    /// allocated); `None`: not named, its stack's if any.
    pub category: Option<super::Category>,
}
