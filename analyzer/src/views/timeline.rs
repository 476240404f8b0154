//! `timeline`: live device bytes over time, bucketed. Each bucket keeps the most bytes
//! live during it and the bytes live at its end, so memory is buckets x series, never
//! events. Without a chosen resolution the buckets start at 1 us and widen tenfold
//! whenever there would be more than [`AUTO_BUCKETS`] of them.

use super::categories;
use super::timeline_categories::{CategorySeries, LAYERS, RESERVED_LAYERS};
use crate::model::Map;
use crate::replay::{Run, Step};
use serde::Serialize;
use vramtrace_schema::Op;

/// Most buckets an automatic resolution keeps (it ends between a tenth of this and this).
pub const AUTO_BUCKETS: usize = 2000;
/// Most buckets a chosen resolution may take before it is widened too.
pub const MAX_BUCKETS: usize = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// (process index, device ordinal)
    Process(usize, i32),
    /// Run device index.
    Device(usize),
    /// A layer around reserved, for (process index, device ordinal).
    Layer(usize, i32, Layer),
}

/// The layers around reserved memory that a process's trace can show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// Blocks an allocator says it handed out (annotations).
    Allocated,
    /// Reserved but not handed out: the allocator's cache (fragmentation's raw material).
    CachedFree,
    /// This process's memory as NVML reports it (what nvidia-smi shows).
    Device,
    /// Internal fragmentation: bytes of handed-out blocks beyond what was requested.
    InternalFree,
    /// External fragmentation: the largest free piece of reserved memory between blocks,
    /// taken at the first change of each bucket (finding it costs a pass over the blocks).
    LargestFreeBlock,
    /// How many free pieces reserved memory is in, taken with the largest one.
    FreeBlocks,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Allocated => "allocated",
            Layer::CachedFree => "cached_free",
            Layer::Device => "device",
            Layer::InternalFree => "internal_free",
            Layer::LargestFreeBlock => "largest_free_block",
            Layer::FreeBlocks => "free_blocks",
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    max: u64,
    end: u64,
    touched: bool,
}

struct Series {
    key: Key,
    current: u64,
    buckets: Vec<Bucket>,
}

impl Key {
    /// Where [`Slots::series`] keeps this key's series: a process's reserved bytes and
    /// each of its layers; run devices are few and change rarely, so they have none.
    fn slot(self) -> Option<usize> {
        match self {
            Key::Process(..) => Some(0),
            Key::Layer(.., layer) => Some(
                1 + match layer {
                    Layer::Allocated => 0,
                    Layer::CachedFree => 1,
                    Layer::Device => 2,
                    Layer::InternalFree => 3,
                    Layer::LargestFreeBlock => 4,
                    Layer::FreeBlocks => 5,
                },
            ),
            Key::Device(_) => None,
        }
    }
}

/// The series of one process's device, each once first recorded: an event of an
/// annotated trace records three to six of them, and a hash look-up of each key per event
/// cost more than the rest of the timeline's work.
#[derive(Clone, Copy, Default)]
struct Slots {
    series: [Option<usize>; 7],
    /// Its tensors by category, in `TimelineBuilder::categories`.
    categories: Option<usize>,
    /// The bucket in which the largest free block was last taken.
    largest_taken: Option<u64>,
}

/// Fed with every step of a replay; [`TimelineBuilder::finish`] gives the view.
pub struct TimelineBuilder {
    width: u64,
    max_buckets: usize,
    /// Times below this fall within `max_buckets` of the current width.
    covered: u64,
    series: Vec<Series>,
    index: Map<Key, usize>,
    categories: Vec<CategorySeries>,
    /// Per (process index, device ordinal), its series found so far; `last` is the
    /// (process, ordinal) and index in `slots` of the previous step's, since consecutive
    /// events mostly come from one process and device.
    slots: Vec<Slots>,
    slot_index: Map<(usize, i32), usize>,
    last: Option<((usize, i32), usize)>,
    /// The last time recorded and its bucket, so that the steps of one event divide once.
    at: Option<(u64, usize)>,
    /// Steps seen, and live allocations and blocks visited to take the largest free
    /// block: taking it costs a pass over them, so it is taken only while that stays
    /// within [`SAMPLE_VISITS`] per step (a bucket's first change otherwise waits).
    steps: u64,
    visited: u64,
}

/// Live allocations and blocks the largest-free-block samples may visit per step
/// replayed, and in all before that counts: 100,000 live blocks sampled in each of
/// thousands of buckets took 77 s of CPU for a 15-MB trace.
const SAMPLE_VISITS: u64 = 16;
const SAMPLE_VISITS_FREE: u64 = 1 << 20;

impl TimelineBuilder {
    /// `resolution`: bucket width in ns, or `None` for automatic.
    pub fn new(resolution: Option<u64>) -> Self {
        let (width, max_buckets) = match resolution {
            Some(w) => (w.max(1), MAX_BUCKETS),
            None => (1_000, AUTO_BUCKETS),
        };
        TimelineBuilder {
            width,
            max_buckets,
            covered: covered(width, max_buckets),
            series: Vec::new(),
            index: Map::default(),
            categories: Vec::new(),
            slots: Vec::new(),
            slot_index: Map::default(),
            last: None,
            at: None,
            steps: 0,
            visited: 0,
        }
    }

    pub fn step(&mut self, step: &Step) {
        self.steps += 1;
        self.layers(step);
        let mut seen_dev = None;
        for c in step.changes {
            if seen_dev == Some(c.dev) {
                continue;
            }
            seen_dev = Some(c.dev);
            let live = step.model.devices.get(&c.dev).map_or(0, |d| d.reserved);
            let slot = self.slots_of(step.process, c.dev);
            let i = self.series_in(slot, Key::Process(step.process, c.dev));
            self.record_at(i, step.time, live);
            // A program without tensors that names its allocations' categories.
            let tensors = step
                .model
                .layers
                .devices
                .get(&c.dev)
                .is_some_and(|l| l.annotated);
            if step.model.categories.annotated && !tensors {
                self.categories_changed(step, slot, c.dev, true);
            }
            if let Some(d) = step.devices.lookup(step.process, c.dev) {
                let total = step.devices.devices[d].1.reserved;
                self.record(Key::Device(d), step.time, total);
            }
        }
    }

    /// The allocated, cached and device layers, where the trace has them.
    fn layers(&mut self, step: &Step) {
        let e = step.event;
        let annotated = matches!(e.api.op(), Op::BlockAlloc | Op::BlockFree);
        let reserved_changed = !step.changes.is_empty();
        let sampled = e.api.op() == Op::DeviceSample && e.ok();
        if !(annotated || reserved_changed || sampled) {
            return;
        }
        let Some(layer) = step.model.layers.devices.get(&e.dev) else {
            return;
        };
        let p = step.process;
        let slot = self.slots_of(p, e.dev);
        let record = |this: &mut Self, layer: Layer, value: u64| {
            let i = this.series_in(slot, Key::Layer(p, e.dev, layer));
            this.record_at(i, step.time, value);
        };
        if sampled {
            record(self, Layer::Device, e.size);
        }
        let tensors = step.model.tensor_changes();
        if annotated && !tensors.is_empty() {
            self.categories_changed(step, slot, e.dev, false);
        }
        if layer.annotated && (annotated || reserved_changed) {
            let reserved = step.model.devices.get(&e.dev).map_or(0, |d| d.reserved);
            record(self, Layer::Allocated, layer.allocated);
            let cached = reserved.saturating_sub(layer.allocated);
            record(self, Layer::CachedFree, cached);
            let internal = layer.allocated.saturating_sub(layer.requested);
            record(self, Layer::InternalFree, internal);
            let bucket = step.time / self.width;
            let visits = step.model.live_count() as u64;
            let allowed = SAMPLE_VISITS_FREE + SAMPLE_VISITS * self.steps;
            if self.slots[slot].largest_taken != Some(bucket) && self.visited + visits <= allowed {
                self.visited += visits;
                if let Some(state) = step.model.allocator_state(e.dev) {
                    self.slots[slot].largest_taken = Some(bucket);
                    record(
                        self,
                        Layer::LargestFreeBlock,
                        state.largest_free_block_bytes,
                    );
                    record(self, Layer::FreeBlocks, state.free_blocks);
                }
            }
        }
    }

    /// The categories of the tensors (or, `reserved`, of the reserved layer) of the
    /// process's device `dev` (of `slots[slot]`) after `step`. A device's series splits one
    /// layer: its tensors once it has any (the reserved layer's series made before its
    /// first tensor is dropped: its allocator's segments are not what the program named).
    fn categories_changed(&mut self, step: &Step, slot: usize, dev: i32, reserved: bool) {
        let b = self.bucket(step.time);
        let model = step.model;
        if let Some(i) = self.slots[slot].categories {
            if self.categories[i].reserved && !reserved {
                self.categories[i] = CategorySeries::default();
                self.slots[slot].categories = None;
            }
        }
        match self.slots[slot].categories {
            Some(i) if self.categories[i].reserved == reserved => {
                let changes = if reserved {
                    step.changes
                } else {
                    model.tensor_changes()
                };
                let category = |k: &crate::model::GroupKey| categories::category_of(model, k);
                self.categories[i].changed(category, changes, b);
            }
            Some(_) => {}
            None => {
                let live = if reserved {
                    model.devices.get(&dev).map(|d| &d.groups)
                } else {
                    model.layers.tensors.get(&dev).map(|t| &t.groups)
                };
                let empty = Map::default();
                let s = CategorySeries::new(
                    step.process,
                    dev,
                    reserved,
                    model,
                    live.unwrap_or(&empty),
                    b,
                );
                self.categories.push(s);
                self.slots[slot].categories = Some(self.categories.len() - 1);
            }
        }
    }

    /// The index in `slots` of (process, ordinal)'s, added if new.
    #[inline]
    fn slots_of(&mut self, process: usize, ordinal: i32) -> usize {
        if let Some((at, i)) = self.last {
            if at == (process, ordinal) {
                return i;
            }
        }
        let next = self.slots.len();
        let i = *self.slot_index.entry((process, ordinal)).or_insert(next);
        if i == next {
            self.slots.push(Slots::default());
        }
        self.last = Some(((process, ordinal), i));
        i
    }

    /// The series of `key`, a key of the process and device of `slots[slot]`.
    #[inline]
    fn series_in(&mut self, slot: usize, key: Key) -> usize {
        let Some(k) = key.slot() else {
            return self.series_of(key);
        };
        if let Some(i) = self.slots[slot].series[k] {
            return i;
        }
        let i = self.series_of(key);
        self.slots[slot].series[k] = Some(i);
        i
    }

    /// The series of `key`, added if new.
    fn series_of(&mut self, key: Key) -> usize {
        let next = self.series.len();
        let i = *self.index.entry(key).or_insert(next);
        if i == next {
            self.series.push(Series {
                key,
                current: 0,
                buckets: Vec::new(),
            });
        }
        i
    }

    fn record(&mut self, key: Key, t: u64, value: u64) {
        let i = self.series_of(key);
        self.record_at(i, t, value);
    }

    #[inline]
    fn record_at(&mut self, i: usize, t: u64, value: u64) {
        let b = self.bucket(t);
        let s = &mut self.series[i];
        if s.buckets.len() <= b {
            s.buckets.resize(b + 1, Bucket::default());
        }
        let bucket = &mut s.buckets[b];
        if !bucket.touched {
            // Memory held when the bucket began counts toward its most.
            bucket.max = s.current;
            bucket.touched = true;
        }
        bucket.max = bucket.max.max(value);
        bucket.end = value;
        s.current = value;
    }

    /// The bucket of time `t`, the buckets widened first to cover it. One event records
    /// several series at one time: the division is done once for them all.
    #[inline]
    fn bucket(&mut self, t: u64) -> usize {
        if let Some((at, b)) = self.at {
            if at == t {
                return b;
            }
        }
        self.cover(t);
        let b = (t / self.width) as usize;
        self.at = Some((t, b));
        b
    }

    /// Widens the buckets until time `t` falls within `max_buckets` of them.
    fn cover(&mut self, t: u64) {
        while t >= self.covered && t / self.width >= self.max_buckets as u64 {
            self.coarsen();
        }
    }

    /// Ten buckets become one.
    fn coarsen(&mut self) {
        self.width *= 10;
        self.covered = covered(self.width, self.max_buckets);
        self.at = None;
        for s in &mut self.series {
            let mut carry = 0;
            let mut merged = Vec::with_capacity(s.buckets.len() / 10 + 1);
            for chunk in s.buckets.chunks(10) {
                let mut out = Bucket::default();
                for b in chunk {
                    if b.touched {
                        out.max = if out.touched {
                            out.max.max(b.max)
                        } else {
                            b.max
                        };
                        out.touched = true;
                        carry = b.end;
                    } else if out.touched {
                        out.max = out.max.max(carry);
                    }
                }
                out.end = carry;
                merged.push(out);
            }
            s.buckets = merged;
        }
        for c in &mut self.categories {
            c.coarsen();
        }
    }

    /// The view, with every series running to the run's last event.
    pub fn finish(mut self, run: &Run) -> Timeline {
        // The largest free block as the run ended (buckets take it at their first change).
        // (Each record touches its own series, and widening the buckets before or after
        // one gives the same buckets, so the order of these does not matter.)
        let mut sampled: Vec<(usize, i32)> = self
            .slot_index
            .iter()
            .filter(|(_, &i)| self.slots[i].largest_taken.is_some())
            .map(|(&at, _)| at)
            .collect();
        sampled.sort_unstable();
        for (p, dev) in sampled {
            if let Some(state) = run.processes[p].end_allocator_state(dev) {
                let largest = Key::Layer(p, dev, Layer::LargestFreeBlock);
                self.record(largest, run.end_time, state.largest_free_block_bytes);
                let count = Key::Layer(p, dev, Layer::FreeBlocks);
                self.record(count, run.end_time, state.free_blocks);
            }
        }
        // Series run to the last event of any kind, which may lie far past the last
        // recorded change (a failed call at the very end): the buckets must reach it too.
        self.cover(run.end_time);
        let last = (run.end_time / self.width) as usize;
        let mut series: Vec<TimelineSeries> = self
            .series
            .iter()
            .map(|s| {
                let mut carry = 0;
                let points = (0..=last.max(s.buckets.len().saturating_sub(1)))
                    .map(|b| {
                        let (max, end) = match s.buckets.get(b) {
                            Some(x) if x.touched => (x.max, x.end),
                            _ => (carry, carry),
                        };
                        carry = end;
                        Point {
                            time_ns: b as u64 * self.width,
                            max_bytes: max,
                            live_bytes: end,
                        }
                    })
                    .collect();
                describe(run, s.key, points)
            })
            .collect();
        series.extend(self.category_series(run, last + 1));
        series.sort_by(|a, b| {
            (
                a.scope,
                &a.host,
                &a.gpu,
                a.pid,
                a.device,
                a.layer != "reserved",
                a.layer,
            )
                .cmp(&(
                    b.scope,
                    &b.host,
                    &b.gpu,
                    b.pid,
                    b.device,
                    b.layer != "reserved",
                    b.layer,
                ))
        });
        Timeline {
            format: "vramtrace-timeline",
            version: super::JSON_VERSION,
            start_unix_ns: run.start_unix_ns,
            resolution_ns: self.width,
            series,
        }
    }
}

impl TimelineBuilder {
    /// The tensors' series by category, for processes whose categories are known, those of
    /// a category that ever held bytes.
    fn category_series(&self, run: &Run, buckets: usize) -> Vec<TimelineSeries> {
        let mut out = Vec::new();
        for s in &self.categories {
            let p = &run.processes[s.process];
            let (known, layers) = match s.reserved {
                // A series dropped for its device's tensors.
                _ if s.buckets.is_empty() => (false, &LAYERS),
                true => (p.categories.annotated, &RESERVED_LAYERS),
                false => (categories::known(p), &LAYERS),
            };
            if !known {
                continue;
            }
            for (c, layer) in layers.iter().enumerate() {
                let points = s.points(c, buckets);
                if points.iter().all(|p| p.0 == 0 && p.1 == 0) {
                    continue;
                }
                let points = points
                    .into_iter()
                    .enumerate()
                    .map(|(b, (max_bytes, live_bytes))| Point {
                        time_ns: b as u64 * self.width,
                        max_bytes,
                        live_bytes,
                    })
                    .collect();
                out.push(TimelineSeries {
                    layer,
                    ..describe(run, Key::Process(s.process, s.device), points)
                });
            }
        }
        out
    }
}

impl Timeline {
    /// Keeps the series of one layer (`--layer`): `allocated` keeps the tensors' series
    /// (annotated blocks, and a hook snapshot's tensors, which the replay gives as one),
    /// `reserved` the reserved bytes'. Without it every layer is kept, each series naming
    /// its own.
    pub fn keep_layer(&mut self, layer: super::layer::Layer) {
        let of_layer = match layer {
            super::layer::Layer::Allocated => &LAYERS,
            super::layer::Layer::Reserved => &RESERVED_LAYERS,
        };
        self.series
            .retain(|s| s.layer == layer.name() || of_layer.contains(&s.layer));
    }
}

/// The first time past `max_buckets` buckets of `width` (or the end of time: `cover`
/// then divides to be sure).
fn covered(width: u64, max_buckets: usize) -> u64 {
    width.saturating_mul(max_buckets as u64)
}

fn describe(run: &Run, key: Key, points: Vec<Point>) -> TimelineSeries {
    match key {
        Key::Layer(p, ordinal, layer) => TimelineSeries {
            layer: layer.name(),
            ..describe(run, Key::Process(p, ordinal), points)
        },
        Key::Process(p, ordinal) => {
            let m = &run.processes[p];
            let id = crate::replay::DeviceId::of(&m.header, ordinal);
            TimelineSeries {
                layer: "reserved",
                scope: "process",
                pid: Some(m.header.pid),
                rank: m.rank().map(str::to_string),
                host: id.host,
                gpu: id.gpu,
                device: Some(ordinal),
                points,
            }
        }
        Key::Device(i) => {
            let id = &run.devices.devices[i].0;
            TimelineSeries {
                layer: "reserved",
                scope: "run",
                pid: None,
                rank: None,
                host: id.host.clone(),
                gpu: id.gpu.clone(),
                device: None,
                points,
            }
        }
    }
}

#[derive(Serialize)]
pub struct Timeline {
    pub format: &'static str,
    pub version: u32,
    pub start_unix_ns: u64,
    /// Bucket width.
    pub resolution_ns: u64,
    pub series: Vec<TimelineSeries>,
}

#[derive(Serialize)]
pub struct TimelineSeries {
    /// `"run"`: every process on the device summed; `"process"`: one process's ordinal.
    pub scope: &'static str,
    /// `"reserved"` (device memory held from the driver); for a process also `"allocated"`
    /// (annotated blocks, or the tensors of a PyTorch snapshot), `"cached_free"` (reserved minus allocated) and `"device"` (NVML).
    pub layer: &'static str,
    pub pid: Option<u32>,
    pub rank: Option<String>,
    pub host: String,
    pub gpu: String,
    pub device: Option<i32>,
    pub points: Vec<Point>,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// Start of the bucket (run time).
    pub time_ns: u64,
    /// Most bytes live at any moment of the bucket.
    pub max_bytes: u64,
    /// Bytes live at the end of the bucket.
    pub live_bytes: u64,
}
