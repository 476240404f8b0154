//! One process's replay.

use super::at_peak::AtReservedPeak;
use super::block::{Block, GroupKey};
use super::category::{CategoryRanges, TensorCategories};
use super::device::{DeviceUsage, GroupBytes};
use super::failure::{
    largest_groups, AllocatorState, Failure, FAILURE_GROUPS, KEPT_FAILURES, RECENT_EVENTS,
};
use super::layers::{Change, Layers};
use super::off_device::OffDevice;
use super::physical::PhysicalTracker;
use super::Map;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use vramtrace_schema::reader::{ReadNotes, TraceError};
use vramtrace_schema::{Api, Event, Header, Kind, Op, StackTable};

/// What a process did, counted by call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub events: u64,
    /// Successful allocations of any kind (device, managed, pool, pinned host, array) and
    /// `cuMemCreate` physical handles.
    pub allocations: u64,
    /// Frees of any kind, successful or not.
    pub frees: u64,
    /// Allocations and `cuMemCreate` calls that failed.
    pub failed_allocations: u64,
    /// Successful frees of an address never seen allocated (allocated before tracing
    /// started, or by a path vramtrace does not see). `cudaFree(NULL)` is not counted.
    pub unknown_frees: u64,
}

/// The state of one process after replaying its trace (or part of it).
pub struct ProcessModel {
    pub path: PathBuf,
    pub header: Header,
    pub counts: Counts,
    pub devices: BTreeMap<i32, DeviceUsage>,
    /// Pinned host memory held now and at most; never device memory.
    pub pinned_host: u64,
    pub peak_pinned_host: u64,
    /// Memory that is not device memory, by location (pinned host memory among it).
    pub off_device: OffDevice,
    pub failures: Vec<Failure>,
    /// The last free/total the program was told by `cuMemGetInfo`/`cudaMemGetInfo`.
    pub last_meminfo: Option<(u64, u64)>,
    /// Time of the last event (ns since the trace start).
    pub last_t: u64,
    pub notes: ReadNotes,
    /// A PyTorch snapshot's flags saying its history was cut short (empty: not said).
    pub history_truncated: Vec<String>,
    /// The allocated and device layers.
    pub layers: Layers,
    /// Frames and stack nodes of the trace (complete once the replay has finished).
    pub stacks: StackTable,
    /// What its tensors are for, where known (a snapshot's stacks and recorded storages).
    pub categories: TensorCategories,
    /// Marker names by id.
    pub names: Map<u64, String>,
    /// The error that stopped reading, if any: everything before it was used.
    pub error: Option<TraceError>,
    /// A snapshot's devices: what each history started with (rebuilt from the final
    /// state), and the allocator model's state at its end.
    pub windows: BTreeMap<i32, super::Window>,
    pub allocator_ends: BTreeMap<i32, AllocatorState>,
    /// Whether PyTorch's expandable segments were on: a snapshot's settings or segments,
    /// a trace's `PYTORCH_CUDA_ALLOC_CONF`; `None` where neither says.
    pub expandable_segments: Option<bool>,
    /// Per device, the tensors and NVML's figure at its reserved layer's peak.
    pub at_reserved_peak: BTreeMap<i32, AtReservedPeak>,
    /// Category ranges open now (markers `category:NAME`).
    ranges: CategoryRanges,
    live: Map<u64, Block>,
    /// Addresses allocated again before their free was seen: frees still owed to blocks
    /// already replaced.
    replaced: Map<u64, u32>,
    physical: PhysicalTracker,
    recent: VecDeque<Event>,
    changes: Vec<Change>,
}

/// Every group's bytes and blocks by the category the program named for it (`unknown`
/// where none), in [`super::Category::ALL`]'s order.
fn by_named_category(groups: &Map<GroupKey, GroupBytes>) -> [GroupBytes; 6] {
    let mut split = [GroupBytes::default(); 6];
    for (key, g) in groups {
        let c = &mut split[key.category.unwrap_or(super::Category::Unknown) as usize];
        c.bytes = c.bytes.saturating_add(g.bytes);
        c.blocks = c.blocks.saturating_add(g.blocks);
    }
    split
}

impl ProcessModel {
    pub fn new(path: PathBuf, header: Header) -> Self {
        let expandable_segments = expandable_in(&header);
        ProcessModel {
            path,
            header,
            counts: Counts::default(),
            devices: BTreeMap::new(),
            pinned_host: 0,
            peak_pinned_host: 0,
            off_device: OffDevice::default(),
            failures: Vec::new(),
            last_meminfo: None,
            last_t: 0,
            notes: ReadNotes::default(),
            history_truncated: Vec::new(),
            layers: Layers::default(),
            stacks: StackTable::default(),
            categories: TensorCategories::default(),
            names: Map::default(),
            error: None,
            windows: BTreeMap::new(),
            allocator_ends: BTreeMap::new(),
            expandable_segments,
            ranges: CategoryRanges::default(),
            at_reserved_peak: BTreeMap::new(),
            live: Map::default(),
            replaced: Map::default(),
            physical: PhysicalTracker::default(),
            recent: VecDeque::with_capacity(RECENT_EVENTS),
            changes: Vec::new(),
        }
    }

    /// Applies one event. [`ProcessModel::changes`] then tells what it did to device memory.
    pub fn apply(&mut self, e: &Event) {
        self.changes.clear();
        self.layers.clear_changes();
        self.counts.events += 1;
        self.last_t = self.last_t.max(e.t);
        let op = e.api.op();
        match op {
            Op::Alloc | Op::Create => self.allocate(e),
            Op::Free => self.free(e),
            Op::Release if e.ok() => {
                if let Some(b) = e.handle.and_then(|h| self.physical.release(h)) {
                    self.uncount(&b);
                }
            }
            Op::Map if e.ok() => {
                if let Some(h) = e.handle {
                    self.physical.map(e.addr, e.size, h);
                }
            }
            Op::Unmap if e.ok() => {
                for b in self.physical.unmap(e.addr, e.size) {
                    self.uncount(&b);
                }
            }
            Op::Meminfo if e.ok() => {
                if let (Some(f), None, Api::ProbeMeminfo) = (e.free, e.total, e.api) {
                    // A driver figure without the total (a PyTorch `oom` entry's
                    // `device_free`): it belongs to the failure it follows.
                    if let Some(failure) = self.failures.last_mut() {
                        if self.recent.back().is_some_and(|r| *r == failure.event) {
                            failure.device_free = Some(f);
                        }
                    }
                }
                if let (Some(f), Some(t)) = (e.free, e.total) {
                    // vramtrace's own question right after a failure belongs to it.
                    if e.api == Api::ProbeMeminfo {
                        if let Some(failure) = self.failures.last_mut() {
                            if self.recent.back().is_some_and(|r| *r == failure.event) {
                                failure.last_meminfo = Some((f, t));
                                failure.probe = Some((f, t));
                            }
                        }
                    }
                    self.last_meminfo = Some((f, t));
                }
            }
            Op::BlockAlloc => self.layers.block_alloc(
                e.t,
                e.dev,
                e.addr,
                e.size,
                e.requested.unwrap_or(e.size),
                GroupKey {
                    api: e.api,
                    stack: e.stack,
                    category: self.ranges.current(e.tid),
                },
            ),
            Op::Marker => {
                let name = e.handle.and_then(|h| self.names.get(&h));
                if name.is_some_and(|n| self.ranges.marker(e.tid, n)) {
                    self.categories.annotated = true;
                }
            }
            Op::BlockFree => self.layers.block_free(e.addr),
            Op::DeviceSample if e.ok() => {
                self.layers.device_sample(e.dev, e.size);
                let reserved = self.devices.get(&e.dev).map_or(0, |d| d.reserved);
                self.at_reserved_peak
                    .entry(e.dev)
                    .or_default()
                    .sampled(e.size, reserved);
            }
            _ => {}
        }
        // Each device's changes of the event together (an address handed out again
        // changes two blocks, of one device or two).
        let changes = self.layers.changes();
        for (i, c) in changes.iter().enumerate() {
            if changes[..i].iter().any(|x| x.dev == c.dev) {
                continue;
            }
            if let Some(at) = self.at_reserved_peak.get_mut(&c.dev) {
                let live = self.layers.tensors.get(&c.dev).map(|t| &t.groups);
                at.tensors_changed(e.t, changes.iter().filter(|x| x.dev == c.dev), live);
            }
        }
        if self.recent.len() == RECENT_EVENTS {
            self.recent.pop_front();
        }
        self.recent.push_back(*e);
    }

    fn allocate(&mut self, e: &Event) {
        if !e.ok() {
            self.counts.failed_allocations += 1;
            if self.failures.len() == KEPT_FAILURES {
                return;
            }
            let device = self.devices.get(&e.dev);
            let groups = device.map(|d| &d.groups);
            self.failures.push(Failure {
                event: *e,
                requested: e.size,
                reserved_on_device: device.map(|d| d.reserved).unwrap_or(0),
                peak_before: device.map(|d| d.peak_reserved).unwrap_or(0),
                groups: groups
                    .map(|g| largest_groups(g, FAILURE_GROUPS))
                    .unwrap_or_default(),
                named: groups
                    .filter(|_| self.categories.annotated)
                    .map(by_named_category),
                live_groups: groups.map_or(0, |g| g.len() as u64),
                live_blocks: groups.map_or(0, |g| g.values().map(|g| g.blocks).sum()),
                last_meminfo: self.last_meminfo,
                recent: self.recent.iter().copied().collect(),
                allocator: self.allocator_state(e.dev),
                tensors: self
                    .layers
                    .tensors
                    .get(&e.dev)
                    .map(|t| t.groups.clone())
                    .unwrap_or_default(),
                device_free: None,
                device_total: None,
                probe: None,
                device_used: self.layers.devices.get(&e.dev).and_then(|l| l.device),
                beyond_reserved: self
                    .at_reserved_peak
                    .get(&e.dev)
                    .and_then(AtReservedPeak::beyond_reserved_now),
                allocations_before: self.counts.allocations,
            });
            return;
        }
        self.counts.allocations += 1;
        let block = Block {
            addr: if e.api.op() == Op::Create {
                e.handle.unwrap_or(0)
            } else {
                e.addr
            },
            size: e.size,
            api: e.api,
            dev: e.dev,
            t: e.t,
            tid: e.tid,
            stack: e.stack,
            kind: e.kind(),
            loc: e.loc,
            category: self.ranges.current(e.tid),
        };
        if e.api.op() == Op::Create {
            if let Some(old) = self.physical.create(block) {
                self.uncount(&old);
            }
        } else if let Some(old) = self.live.insert(block.addr, block) {
            // The driver handed out a live address again: its free has not been seen
            // yet. The thread that freed it was preempted between the free and its
            // timestamp, so its event comes a moment later: that free is the old
            // block's, and must not take the new one.
            self.uncount(&old);
            *self.replaced.entry(block.addr).or_default() += 1;
        }
        self.count(&block);
    }

    fn free(&mut self, e: &Event) {
        self.counts.frees += 1;
        if !e.ok() || e.addr == 0 {
            return;
        }
        if let Some(n) = self.replaced.get_mut(&e.addr) {
            *n -= 1;
            if *n == 0 {
                self.replaced.remove(&e.addr);
            }
            return;
        }
        match self.live.remove(&e.addr) {
            Some(b) => self.uncount(&b),
            None => self.counts.unknown_frees += 1,
        }
    }

    fn count(&mut self, b: &Block) {
        let kind = b.kind();
        if let Some(location) = b.off_device() {
            self.off_device.add(location, b.size);
            if kind == Kind::Host {
                self.pinned_host = self.pinned_host.saturating_add(b.size);
                self.peak_pinned_host = self.peak_pinned_host.max(self.pinned_host);
            }
        } else if kind.is_device_memory() {
            self.changes.push(Change {
                dev: b.dev,
                key: b.key(),
                bytes: b.size,
                added: true,
            });
            let d = self
                .devices
                .entry(b.dev)
                .or_insert_with(|| DeviceUsage::new(b.dev));
            let before = d.peak_reserved;
            d.add(b.t, b.key(), b.size);
            if d.peak_reserved > before {
                self.at_reserved_peak.entry(b.dev).or_default().peaked(b.t);
            }
        }
    }

    fn uncount(&mut self, b: &Block) {
        let kind = b.kind();
        if let Some(location) = b.off_device() {
            self.off_device.remove(location, b.size);
            if kind == Kind::Host {
                self.pinned_host = self.pinned_host.saturating_sub(b.size);
            }
        } else if let Some(d) = self.devices.get_mut(&b.dev) {
            d.remove(b.key(), b.size);
            self.changes.push(Change {
                dev: b.dev,
                key: b.key(),
                bytes: b.size,
                added: false,
            });
        }
    }

    /// Every peak counts from time `t` (ns since the trace start) on, as after
    /// `torch.cuda.reset_peak_memory_stats` for each layer and device: what it holds now
    /// is its peak so far.
    pub fn restart_peaks(&mut self, t: u64) {
        for d in self.devices.values_mut() {
            d.restart_peak(t);
            self.at_reserved_peak.entry(d.device).or_default().peaked(t);
        }
        self.layers.restart_peaks(t);
        self.peak_pinned_host = self.pinned_host;
        self.off_device.restart_peaks();
    }

    /// What the last applied event did to the live tensors (the allocated layer).
    pub fn tensor_changes(&self) -> &[Change] {
        self.layers.changes()
    }

    /// What the last applied event did to device memory (pinned host memory is not in it).
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Settles what the replay leaves pending (the live set at each device's peak); call
    /// once after the last event.
    pub fn finish(&mut self) {
        for d in self.devices.values_mut() {
            d.settle_peak();
        }
        for (dev, at) in &mut self.at_reserved_peak {
            at.take(self.layers.tensors.get(dev).map(|t| &t.groups));
        }
        self.layers.finish();
    }

    /// The allocated layer on `dev` now, where an allocator annotates its blocks: its
    /// cache and how broken up it is (the free pieces of reserved memory between blocks).
    pub fn allocator_state(&self, dev: i32) -> Option<AllocatorState> {
        let layer = self.layers.devices.get(&dev).filter(|l| l.annotated)?;
        let mut segments: Vec<(u64, u64)> = self
            .live
            .values()
            .filter(|b| {
                b.dev == dev && matches!(b.kind(), Kind::Device | Kind::Managed | Kind::Pool)
            })
            .map(|b| (b.addr, b.size))
            .collect();
        // Pages of expandable segments (`cuMemMap` of a `cuMemCreate` handle each): one
        // run of free memory crosses the pages mapped side by side.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (addr, size) in self.physical.mapped(dev) {
            match runs.last_mut() {
                Some(last) if last.0.saturating_add(last.1) == addr => {
                    last.1 = last.1.saturating_add(size)
                }
                _ => runs.push((addr, size)),
            }
        }
        let expandable = !runs.is_empty();
        segments.extend(runs);
        segments.sort_unstable();
        let (largest, count, free) =
            super::layers::free_space(&segments, &self.layers.live_blocks(dev));
        Some(AllocatorState {
            allocated_bytes: layer.allocated,
            cached_free_bytes: free,
            largest_free_block_bytes: largest,
            free_blocks: count,
            expandable_segments: expandable,
            unmapped_bytes: None,
        })
    }

    /// [`ProcessModel::allocator_state`] once the replay is over: the allocator model's
    /// own where a snapshot was read through it.
    pub fn end_allocator_state(&self, dev: i32) -> Option<AllocatorState> {
        self.allocator_ends
            .get(&dev)
            .copied()
            .or_else(|| self.allocator_state(dev))
    }

    /// What [`ProcessModel::allocator_state`] visits: live allocations and blocks.
    pub fn live_count(&self) -> usize {
        self.live.len() + self.layers.block_count()
    }

    /// Everything live now (at the end: never freed), device memory and pinned host.
    pub fn live_blocks(&self) -> impl Iterator<Item = &Block> {
        self.live.values().chain(self.physical.live())
    }

    /// Whether the trace ended with an end record (the process exited normally).
    pub fn ended(&self) -> bool {
        self.notes.end.is_some()
    }

    /// Markers that began like a category range's but named no category, and the first
    /// one's name.
    pub fn misnamed_ranges(&self) -> Option<(u64, &str)> {
        self.ranges.misnamed_markers()
    }

    /// Rank from the header's `RANK`, if set.
    pub fn rank(&self) -> Option<&str> {
        self.header.env.get("RANK").map(String::as_str)
    }
}

/// `expandable_segments` as a trace's `PYTORCH_CUDA_ALLOC_CONF` sets it (PyTorch reads
/// `True` and `true`); `None` where the header has no such variable.
fn expandable_in(header: &Header) -> Option<bool> {
    let conf = header.env.get("PYTORCH_CUDA_ALLOC_CONF")?;
    let on = conf.split([',', ' ']).any(|kv| {
        kv.split_once(':').is_some_and(|(k, v)| {
            k.trim() == "expandable_segments" && v.trim().eq_ignore_ascii_case("true")
        })
    });
    Some(on)
}
