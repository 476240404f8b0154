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
    /// be read).
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

/// Whether `p`'s tensors have categories: a snapshot's, or a trace's joined by one.
fn known(p: &ProcessModel) -> bool {
    p.categories.from_snapshot || p.header.interposer == SNAPSHOT_INTERPOSER
}

fn category_of(p: &ProcessModel, stack: u64) -> Category {
    p.categories
        .by_stack
        .get(&stack)
        .copied()
        .unwrap_or(Category::Unknown)
}

/// How a text says the categories are known: `inferred from their frames`.
pub fn how(c: &Categories) -> &'static str {
    match c.known_by {
        "recorded" => "recorded from the program's modules and optimizers, the rest inferred from frames",
        "recorded_in_part" => "recorded in part from the program's modules and optimizers (the hook did not see them all), the rest inferred from frames",
        _ => "inferred from their frames",
    }
}

/// The split of tensors given as (category, bytes, how many).
fn split(tensors: impl Iterator<Item = (Category, u64, u64)>) -> Categories {
    split_known_by(tensors, "inferred")
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
    Some(split(groups.iter().map(|(key, g)| {
        (category_of(p, key.stack), g.bytes, g.blocks)
    })))
}

/// The same for a run device's groups (every process on it): known where any of its
/// processes' categories are.
pub fn of_run_groups(run: &Run, groups: &Map<RunGroupKey, GroupBytes>) -> Option<Categories> {
    let processes = || groups.keys().map(|(p, _)| &run.processes[*p]);
    if groups.is_empty() || !processes().any(known) {
        return None;
    }
    Some(split(groups.iter().map(|((p, key), g)| {
        let category = category_of(&run.processes[*p], key.stack);
        (category, g.bytes, g.blocks)
    })))
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
        (true, _) => "inferred",
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
        _ => category_of(p, b.key.stack),
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
    largest_first(c)
        .iter()
        .map(|c| format!("{} {}", c.category.words(), crate::units::bytes(c.bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}
