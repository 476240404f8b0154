//! What a tensor is for: parameters, gradients, optimizer state, activations. Known from
//! what allocated it (its stack), so a category belongs to a stack id.

use super::Map;
use serde::Serialize;

/// A tensor's category, in the order the views list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Parameters and buffers: made by a module's construction, `.to()`/`.cuda()`, or
    /// `load_state_dict`.
    Parameters,
    /// Allocated by the backward pass: gradients, and the backward pass's temporaries.
    Gradients,
    /// Allocated inside an optimizer's `step`: its state (Adam's two moments), and its
    /// temporaries.
    OptimizerState,
    /// Allocated by a module's forward: activations, and the forward's temporaries.
    Activations,
    /// Any other tensor with a stack: made by the program's own code outside a module's
    /// forward, the backward pass or an optimizer (inputs, weights a program builds
    /// itself, temporaries).
    Other,
    /// A tensor without a stack (allocated before a snapshot's history began, or its
    /// stack was not recorded), or with a stack no category is read from (a trace's own).
    Unknown,
}

impl Category {
    pub const ALL: [Category; 6] = [
        Category::Parameters,
        Category::Gradients,
        Category::OptimizerState,
        Category::Activations,
        Category::Other,
        Category::Unknown,
    ];

    /// The name the JSON and the Parquet tables give it.
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer_state",
            Category::Activations => "activations",
            Category::Other => "other",
            Category::Unknown => "unknown",
        }
    }

    /// The words a text view uses.
    pub fn words(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activations => "activations",
            Category::Other => "other tensors",
            Category::Unknown => "not known",
        }
    }
}

/// What a process's tensors are for, as its sources tell it.
#[derive(Clone, Debug, Default)]
pub struct TensorCategories {
    /// By stack id: inferred from the frames (a snapshot's stacks).
    pub by_stack: Map<u64, Category>,
    /// By a storage's device and address when a snapshot was written, with its bytes:
    /// recorded from the program's own modules and optimizers (the PyTorch hook's
    /// `vramtrace_tensors`).
    pub recorded: Map<(i32, u64), (Category, u64)>,
    /// The walk that recorded them did not see them all (it stopped, or an object could
    /// not be read): some are missing.
    pub recorded_partly: bool,
    /// A snapshot fed the process: its tensors have categories, if only "not known".
    pub from_snapshot: bool,
    /// The program named categories itself, with ranges ([`CategoryRanges`]).
    pub annotated: bool,
    /// By stack id: PyTorch's own labels (a snapshot's `user_metadata` and private pools).
    pub labels: Map<u64, super::Label>,
}

impl TensorCategories {
    /// Another source's categories, added (a snapshot joining a trace).
    pub fn extend(&mut self, other: TensorCategories) {
        self.by_stack.extend(other.by_stack);
        self.recorded.extend(other.recorded);
        self.recorded_partly |= other.recorded_partly;
        self.from_snapshot |= other.from_snapshot;
        self.annotated |= other.annotated;
        self.labels.extend(other.labels);
    }
}

impl Category {
    /// The category a snapshot's `vramtrace_tensors` names; `None` for any other name.
    pub fn recorded(name: &str) -> Option<Category> {
        [
            Category::Parameters,
            Category::Gradients,
            Category::OptimizerState,
        ]
        .into_iter()
        .find(|c| c.name() == name)
    }
}

/// The marker that opens a category range (`category:parameters`); `/category:NAME`
/// closes it. Tensors (blocks) a thread allocates inside are of that category.
pub const RANGE_PREFIX: &str = "category:";

/// Whether a marker's name opens or closes a category range: such markers are not the
/// program's points or phases (the plots and phase comparisons leave them out).
pub fn names_a_range(name: &str) -> bool {
    let name = name.strip_prefix('/').unwrap_or(name);
    name.strip_prefix(RANGE_PREFIX)
        .and_then(Category::named)
        .is_some()
}

/// Ranges open per thread, innermost last, at most this deep: a program that opens ranges
/// and never closes them keeps the outer ones.
const MOST_NESTED: usize = 64;

/// The category ranges open in a process: markers `category:NAME` ... `/category:NAME`
/// on one thread, from C and C++ through the annotation API (`vramtrace.h`'s
/// `vramtrace_category_begin_hint`), as from Python.
///
/// A thread's ranges are kept until they close: a trace does not say when a thread ended,
/// and a cap on threads would drop a later thread's properly closed range (a pool of
/// threads that died with ranges open). The map holds at most one entry per marker read.
#[derive(Clone, Debug, Default)]
pub struct CategoryRanges {
    open: Map<u32, Vec<Category>>,
    /// Markers that begin like a range's but name no category (`category:Parameters`):
    /// how many, and the first one's name, for a note (a misspelt range is otherwise a
    /// plain marker, and the memory inside it silently `unknown`).
    misnamed: u64,
    first_misnamed: Option<String>,
}

impl CategoryRanges {
    /// A marker `name` on thread `tid`; whether it opened or closed a category range.
    pub fn marker(&mut self, tid: u32, name: &str) -> bool {
        if let Some(c) = name
            .strip_prefix('/')
            .and_then(|n| n.strip_prefix(RANGE_PREFIX))
        {
            let Some(c) = Category::named(c) else {
                self.misnamed(name);
                return false;
            };
            if let Some(open) = self.open.get_mut(&tid) {
                // The innermost range of that category closes (an unmatched close does nothing).
                if let Some(i) = open.iter().rposition(|&x| x == c) {
                    open.remove(i);
                }
                if open.is_empty() {
                    self.open.remove(&tid);
                }
            }
            return true;
        }
        let Some(c) = name.strip_prefix(RANGE_PREFIX).map(Category::named) else {
            return false;
        };
        let Some(c) = c else {
            self.misnamed(name);
            return false;
        };
        let open = self.open.entry(tid).or_default();
        if open.len() < MOST_NESTED {
            open.push(c);
        }
        true
    }

    fn misnamed(&mut self, name: &str) {
        self.misnamed += 1;
        if self.first_misnamed.is_none() {
            self.first_misnamed = Some(name.chars().take(100).collect());
        }
    }

    /// Markers that began like a range's but named no category, and the first's name.
    pub fn misnamed_markers(&self) -> Option<(u64, &str)> {
        Some((self.misnamed, self.first_misnamed.as_deref()?))
    }

    /// The category of what thread `tid` allocates now: its innermost open range's.
    pub fn current(&self, tid: u32) -> Option<Category> {
        self.open.get(&tid).and_then(|o| o.last().copied())
    }
}

impl Category {
    /// The names a program may give a range: `category:parameters`, ...
    pub fn range_names() -> Vec<String> {
        Category::ALL
            .iter()
            .filter(|c| **c != Category::Unknown)
            .map(|c| format!("{RANGE_PREFIX}{}", c.name()))
            .collect()
    }

    /// A category a program may name: the JSON's names, but `unknown`.
    fn named(name: &str) -> Option<Category> {
        Category::ALL
            .into_iter()
            .filter(|c| *c != Category::Unknown)
            .find(|c| c.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_nest_per_thread_and_close_by_name() {
        let mut r = CategoryRanges::default();
        assert!(r.marker(1, "category:parameters"));
        assert!(r.marker(1, "category:optimizer_state"));
        assert!(r.marker(2, "category:activations"));
        assert_eq!(r.current(1), Some(Category::OptimizerState));
        assert_eq!(r.current(2), Some(Category::Activations));
        assert!(r.marker(1, "/category:optimizer_state"));
        assert_eq!(r.current(1), Some(Category::Parameters));
        // Not a category: a plain marker, nothing changes; counted for a note.
        assert!(!r.marker(1, "category:weights"));
        assert!(!r.marker(1, "forward"));
        assert!(!r.marker(1, "category:unknown"));
        assert!(!r.marker(1, "/category:Parameters"));
        assert_eq!(r.misnamed_markers(), Some((3, "category:weights")));
        assert!(r.marker(1, "/category:parameters"));
        assert_eq!(r.current(1), None);
        // A close of nothing open does nothing.
        assert!(r.marker(3, "/category:gradients"));
        assert_eq!(r.current(3), None);
    }

    #[test]
    fn threads_that_left_ranges_open_do_not_hide_a_later_threads_range() {
        let mut r = CategoryRanges::default();
        for tid in 100..70_100 {
            r.marker(tid, "category:parameters");
        }
        r.marker(5, "category:gradients");
        assert_eq!(r.current(5), Some(Category::Gradients));
    }
}
