//! What the tensors were for: the allocated layer split into parameters, gradients,
//! optimizer state, activations and temporaries, and tensors not known. Each tensor's
//! category is its stack's ([`crate::model::Category`]); a snapshot's are inferred from
//! the frames PyTorch recorded (`crate::snapshot::category`). A trace alone has none yet.

use crate::model::layers::LiveBlock;
use crate::model::{Category, GroupBytes, GroupKey, Map, ProcessModel};
use crate::replay::{Run, RunGroupKey};
use crate::snapshot::events::SNAPSHOT_INTERPOSER;
use serde::Serialize;

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Categories {
    /// How the categories are known: `inferred` (from the frames that allocated each
    /// tensor, by the rules in docs/json.md); `recorded` (the parameters, buffers,
    /// gradients and optimizer state that the program's modules and optimizers held
    /// when the PyTorch hook wrote its snapshot, the rest inferred); `recorded_in_part`
    /// (so, but the hook did not see them all: its walk stopped, or an object could not
    /// be read); `annotated` (the program named them with category ranges, markers
    /// `category:NAME` ... `/category:NAME`, the rest inferred).
    pub known_by: &'static str,
    /// Every category in order, those of no tensor too; they sum to the layer's figure.
    pub split: Vec<CategoryBytes>,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct CategoryBytes {
    pub category: Category,
    pub bytes: u64,
    pub tensors: u64,
}

/// Whether `p`'s tensors have categories: a snapshot's, a trace's joined by one, or a
/// program's that named them with category ranges.
pub fn known(p: &ProcessModel) -> bool {
    p.categories.from_snapshot
        || p.categories.annotated
        || p.header.interposer == SNAPSHOT_INTERPOSER
}

/// The category of a group: the one the program named (a range open when it was
/// allocated), else its stack's.
pub fn category_of(p: &ProcessModel, key: &GroupKey) -> Category {
    key.category.unwrap_or_else(|| {
        p.categories
            .by_stack
            .get(&key.stack)
            .copied()
            .unwrap_or(Category::Unknown)
    })
}

/// How a split read from `p` is known where no record says more.
fn known_by(p: &ProcessModel) -> &'static str {
    if p.categories.annotated {
        "annotated"
    } else {
        "inferred"
    }
}

/// How a text says the categories are known: `inferred from their frames`.
pub fn how(c: &Categories) -> &'static str {
    match c.known_by {
        "recorded" => "recorded from the program's modules and optimizers, the rest inferred from frames",
        "recorded_in_part" => "recorded in part from the program's modules and optimizers (the hook did not see them all), the rest inferred from frames",
        "annotated" => "named by the program's own category ranges (markers category:NAME); the rest by their frames where those say, else not known",
        _ => "inferred from their frames",
    }
}

fn split_known_by(
    tensors: impl Iterator<Item = (Category, u64, u64)>,
    known_by: &'static str,
) -> Categories {
    let mut split: Vec<CategoryBytes> = Category::ALL
        .iter()
        .map(|&category| CategoryBytes {
            category,
            bytes: 0,
            tensors: 0,
        })
        .collect();
    for (category, bytes, n) in tensors {
        let c = &mut split[category as usize];
        c.bytes = c.bytes.saturating_add(bytes);
        c.tensors = c.tensors.saturating_add(n);
    }
    Categories { known_by, split }
}

/// The split of tensor groups (a device's at its peak, or at a failure), in the groups'
/// bytes (requested bytes, as the allocated layer's peak counts them).
pub fn of_groups(p: &ProcessModel, groups: &Map<GroupKey, GroupBytes>) -> Option<Categories> {
    if !known(p) || groups.is_empty() {
        return None;
    }
    Some(split_known_by(
        groups
            .iter()
            .map(|(key, g)| (category_of(p, key), g.bytes, g.blocks)),
        known_by(p),
    ))
}

/// The split of a process's device memory (the reserved layer) by the categories the
/// program named with ranges around its allocations, for a program without tensors (it
/// allocates from the driver itself): `None` where it named none. Memory allocated outside
/// every range is `unknown`; no stack is read (a segment's stack is not a tensor's).
pub fn of_reserved_groups(
    p: &ProcessModel,
    groups: &Map<GroupKey, GroupBytes>,
) -> Option<Categories> {
    if !p.categories.annotated || groups.is_empty() {
        return None;
    }
    Some(split_known_by(
        groups
            .iter()
            .map(|(key, g)| (key.category.unwrap_or(Category::Unknown), g.bytes, g.blocks)),
        "annotated",
    ))
}

/// [`of_reserved_groups`] at a failure: every group's bytes, as the model summed them by
/// category when the call failed (its kept groups are only the largest).
pub fn of_reserved_at_failure(f: &crate::model::Failure) -> Option<Categories> {
    let named = f.named?;
    Some(split_known_by(
        Category::ALL
            .iter()
            .zip(named)
            .map(|(&c, g)| (c, g.bytes, g.blocks)),
        "annotated",
    ))
}

/// The same for a run device's groups (every process on it): known where any of its
/// processes' categories are.
pub fn of_run_groups(run: &Run, groups: &Map<RunGroupKey, GroupBytes>) -> Option<Categories> {
    let processes = || groups.keys().map(|(p, _)| &run.processes[*p]);
    if groups.is_empty() || !processes().any(known) {
        return None;
    }
    let annotated = processes().any(|p| p.categories.annotated);
    Some(split_known_by(
        groups.iter().map(|((p, key), g)| {
            let category = category_of(&run.processes[*p], key);
            (category, g.bytes, g.blocks)
        }),
        if annotated { "annotated" } else { "inferred" },
    ))
}

/// The split of the blocks live at the end on `dev`, in block bytes (as
/// `allocated_bytes_at_end` counts them): a block the PyTorch hook named by its address
/// (its snapshot is the end) has that category, any other its stack's.
pub fn at_end(p: &ProcessModel, dev: i32) -> Option<Categories> {
    if !known(p) || !p.layers.devices.get(&dev).is_some_and(|l| l.annotated) {
        return None;
    }
    let recorded = &p.categories.recorded;
    let known_by = match (recorded.is_empty(), p.categories.recorded_partly) {
        (true, _) => known_by(p),
        (false, false) => "recorded",
        (false, true) => "recorded_in_part",
    };
    let blocks = p.layers.blocks().filter(|(_, b)| b.dev == dev);
    Some(split_known_by(
        blocks.map(|(addr, b)| (at_the_end(p, dev, addr, b), b.size, 1)),
        known_by,
    ))
}

/// The category of block `b` at `addr` on `dev`, live at the end: the PyTorch hook's
/// record of a storage there of its requested bytes (a storage recorded there with other
/// bytes was freed and its address given to another tensor between the snapshot and the
/// hook's walk), else its stack's.
fn at_the_end(p: &ProcessModel, dev: i32, addr: u64, b: &LiveBlock) -> Category {
    match p.categories.recorded.get(&(dev, addr)) {
        Some(&(category, bytes)) if bytes == b.requested => category,
        _ => category_of(p, &b.key),
    }
}

/// The same for one block, or `None` where `p`'s categories are not known (a trace
/// alone): the Parquet `tensors` table's `category`.
pub fn of_block_at_end(p: &ProcessModel, addr: u64, b: &LiveBlock) -> Option<Category> {
    known(p).then(|| at_the_end(p, b.dev, addr, b))
}

/// The categories that hold bytes, largest first (equal ones in category order).
pub fn largest_first(c: &Categories) -> Vec<&CategoryBytes> {
    let mut held: Vec<&CategoryBytes> = c.split.iter().filter(|c| c.bytes > 0).collect();
    held.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.category.cmp(&b.category)));
    held
}

/// `optimizer state 3.2 GiB, gradients 1.6 GiB, ...`: largest first, empty ones left out.
pub fn words(c: &Categories) -> String {
    words_naming(c, Category::Other.words())
}

/// The same of device memory a program without tensors named (its `other` is not tensors).
pub fn reserved_words(c: &Categories) -> String {
    words_naming(c, "other")
}

fn words_naming(c: &Categories, other: &str) -> String {
    largest_first(c)
        .iter()
        .map(|c| {
            let name = match c.category {
                Category::Other => other,
                c => c.words(),
            };
            format!("{name} {}", crate::units::bytes(c.bytes))
        })
        .collect::<Vec<_>>()
        .join(", ")
}
