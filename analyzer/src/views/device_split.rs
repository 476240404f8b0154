//! A process's memory on one device at one moment (its reserved layer's peak, or a
//! failed allocation), whole and in one split: its tensors by category (the allocated
//! layer), the allocator's cache, what libraries took from the driver themselves (NCCL,
//! cuBLAS, cuDNN, by their frames), and below every allocation the CUDA context and the
//! driver's own (NVML's figure for the process less its reserved bytes).

use super::categories::{self, Categories};
use super::libraries::{self, Library};
use crate::model::{Category, Failure, GroupBytes, GroupKey, Map, ProcessModel};
use serde::Serialize;

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct DeviceSplit {
    /// The process's reserved bytes then: every part but `context_and_driver` sums to it.
    pub reserved_bytes: u64,
    /// How the tensors' categories (or, for a program without tensors, its allocations')
    /// are known, as `tensor_categories`' `known_by`; null where no part is a category.
    pub known_by: Option<&'static str>,
    /// The parts that hold bytes, in the order of [`Part`].
    pub parts: Vec<PartBytes>,
    /// Tensor bytes beyond the program's own reserved memory, so in memory a library
    /// allocated (a PyTorch pool on `ncclMemAlloc`): they count as tensors, and the
    /// libraries' parts as what is left of theirs; the allocator cache and the libraries'
    /// parts are then exact together, not each (which library's memory held them, and
    /// how much of it was cache, is not known). 0 otherwise.
    pub tensors_in_libraries: u64,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartBytes {
    pub part: Part,
    pub bytes: u64,
}

/// A part of a device's memory, bottom to top as a plot stacks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Tensors (or, without tensors, allocations the program named) of a category.
    Tensors(Category),
    /// Reserved by the program's allocator but in no live tensor: free cached blocks, and
    /// the rounding of live ones (tensors count their requested bytes).
    AllocatorCache,
    Library(Library),
    /// NVML's figure for the process less its reserved bytes.
    ContextAndDriver,
}

impl Part {
    /// The name the JSON gives it.
    pub fn name(self) -> &'static str {
        match self {
            Part::Tensors(c) => c.name(),
            Part::AllocatorCache => "allocator_cache",
            Part::Library(l) => l.name(),
            Part::ContextAndDriver => "context_and_driver",
        }
    }

    pub fn words(self) -> &'static str {
        match self {
            Part::Tensors(Category::Other) => "other",
            Part::Tensors(c) => c.words(),
            Part::AllocatorCache => "allocator cache",
            Part::Library(l) => l.words(),
            Part::ContextAndDriver => "context and driver",
        }
    }

    /// Where it stands in [`Part::ORDER`].
    fn index(self) -> usize {
        match self {
            Part::Tensors(c) => c as usize,
            Part::AllocatorCache => Category::ALL.len(),
            Part::Library(l) => Category::ALL.len() + 1 + l as usize,
            Part::ContextAndDriver => Category::ALL.len() + 1 + Library::ALL.len(),
        }
    }

    const COUNT: usize = Category::ALL.len() + Library::ALL.len() + 2;

    /// Every part, bottom to top.
    fn order() -> impl Iterator<Item = Part> {
        let tensors = Category::ALL.into_iter().map(Part::Tensors);
        let libraries = Library::ALL.into_iter().map(Part::Library);
        tensors
            .chain([Part::AllocatorCache])
            .chain(libraries)
            .chain([Part::ContextAndDriver])
    }
}

impl Serialize for Part {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// What the split is made of at one moment.
struct Moment<'a> {
    reserved: u64,
    /// Reserved bytes by who allocated them: all of them, or the largest groups.
    reserved_groups: &'a Map<GroupKey, GroupBytes>,
    /// For a program without tensors that named categories: every reserved byte by the
    /// category named, where the groups above are only the largest.
    named: Option<Categories>,
    /// The live tensors, where the device has an allocated layer.
    tensors: Option<&'a Map<GroupKey, GroupBytes>>,
    beyond_reserved: Option<u64>,
}

/// The split at `p`'s reserved peak on `dev`; `None` where it would say nothing known (no
/// category, library or context: all of it `unknown`).
pub fn at_peak(p: &ProcessModel, dev: i32) -> Option<DeviceSplit> {
    let d = p.devices.get(&dev)?;
    let at = p.at_reserved_peak.get(&dev);
    let annotated = p.layers.devices.get(&dev).is_some_and(|l| l.annotated);
    split(
        p,
        Moment {
            reserved: d.peak_reserved,
            reserved_groups: &d.peak_groups,
            named: None,
            tensors: at.filter(|_| annotated).map(|a| a.tensors()),
            beyond_reserved: at.and_then(|a| a.beyond_reserved()),
        },
    )
}

/// The split when `f` failed.
pub fn at_failure(p: &ProcessModel, f: &Failure) -> Option<DeviceSplit> {
    let annotated = p
        .layers
        .devices
        .get(&f.event.dev)
        .is_some_and(|l| l.annotated);
    split(
        p,
        Moment {
            reserved: f.reserved_on_device,
            reserved_groups: &f.groups,
            named: categories::of_reserved_at_failure(f),
            tensors: annotated.then_some(&f.tensors),
            beyond_reserved: f.beyond_reserved,
        },
    )
}

fn split(p: &ProcessModel, m: Moment) -> Option<DeviceSplit> {
    let mut bytes = [0u64; Part::COUNT];
    let mut add = |part: Part, b: u64| {
        let i = part.index();
        bytes[i] = bytes[i].saturating_add(b);
    };
    // What libraries took, and what the program's groups named, among them.
    let mut libraries = 0u64;
    let mut named_in_libraries = [0u64; Category::ALL.len()];
    for (key, g) in m.reserved_groups {
        if let Some(l) = libraries::of_stack(&p.stacks, key.stack, &p.header.exe) {
            add(Part::Library(l), g.bytes);
            libraries = libraries.saturating_add(g.bytes);
            let c = key.category.unwrap_or(Category::Unknown) as usize;
            named_in_libraries[c] = named_in_libraries[c].saturating_add(g.bytes);
        }
    }
    let rest = m.reserved.saturating_sub(libraries);
    let mut known_by = None;
    // Tensor bytes beyond what the program's allocator reserved: in memory a library
    // allocated (a PyTorch pool on `ncclMemAlloc`).
    let mut inside = 0u64;
    match (
        m.tensors,
        categories::of_reserved_groups(p, m.reserved_groups),
    ) {
        (Some(tensors), _) => {
            let mut held = 0u64;
            match categories::of_groups(p, tensors) {
                Some(c) => {
                    known_by = Some(c.known_by);
                    for c in &c.split {
                        add(Part::Tensors(c.category), c.bytes);
                        held = held.saturating_add(c.bytes);
                    }
                }
                None => {
                    held = tensors.values().fold(0, |s, g| s.saturating_add(g.bytes));
                    add(Part::Tensors(Category::Unknown), held);
                }
            }
            add(Part::AllocatorCache, rest.saturating_sub(held));
            inside = held.saturating_sub(rest);
        }
        (None, Some(kept)) => {
            // Named by the program's ranges; all of them where the failure summed them.
            let c = m.named.unwrap_or(kept);
            known_by = Some(c.known_by);
            let mut named = 0u64;
            for c in &c.split {
                let b = c
                    .bytes
                    .saturating_sub(named_in_libraries[c.category as usize]);
                add(Part::Tensors(c.category), b);
                named = named.saturating_add(b);
            }
            add(Part::Tensors(Category::Unknown), rest.saturating_sub(named));
        }
        (None, None) => add(Part::Tensors(Category::Unknown), rest),
    }
    if let Some(b) = m.beyond_reserved {
        add(Part::ContextAndDriver, b);
    }
    // Those count as tensors: the libraries' parts are what is left of theirs.
    let tensors_in_libraries = inside;
    for l in Library::ALL {
        let b = &mut bytes[Part::Library(l).index()];
        let taken = inside.min(*b);
        *b -= taken;
        inside -= taken;
    }
    let parts: Vec<PartBytes> = Part::order()
        .map(|part| PartBytes {
            part,
            bytes: bytes[part.index()],
        })
        .filter(|p| p.bytes > 0)
        .collect();
    let says_something = parts
        .iter()
        .any(|p| p.part != Part::Tensors(Category::Unknown));
    says_something.then_some(DeviceSplit {
        reserved_bytes: m.reserved,
        known_by,
        parts,
        tensors_in_libraries,
    })
}

/// `parameters 1.2 GiB, gradients 2.6 GiB, ..., context and driver 300 MiB`: bottom to
/// top, as a plot stacks them.
pub fn words(s: &DeviceSplit) -> String {
    s.parts
        .iter()
        .map(|p| format!("{} {}", p.part.words(), crate::units::bytes(p.bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `parameters 1.2 GiB, ..., context and driver 300 MiB (categories named by the
/// program's ranges; context and driver: NVML's figure less reserved)`.
pub fn line(s: &DeviceSplit) -> String {
    let has = |f: fn(Part) -> bool| s.parts.iter().any(|p| f(p.part));
    let mut how = Vec::new();
    match s.known_by {
        Some("annotated") => how.push("categories named by the program's ranges"),
        Some("inferred") => how.push("categories inferred from frames"),
        Some(_) => how.push("categories recorded from the program's objects"),
        None => {}
    }
    if has(|p| matches!(p, Part::Library(_))) {
        how.push("libraries by their frames");
    }
    if has(|p| p == Part::ContextAndDriver) {
        how.push("context and driver: NVML's figure less reserved");
    }
    if s.tensors_in_libraries > 0 {
        how.push("some tensors were in libraries' memory: the cache and the libraries' parts are exact together, not each");
    }
    let how = if how.is_empty() {
        String::new()
    } else {
        format!(" ({})", how.join("; "))
    };
    format!("{}{how}", words(s))
}
