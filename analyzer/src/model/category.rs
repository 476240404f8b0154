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
}

impl TensorCategories {
    /// Another source's categories, added (a snapshot joining a trace).
    pub fn extend(&mut self, other: TensorCategories) {
        self.by_stack.extend(other.by_stack);
        self.recorded.extend(other.recorded);
        self.recorded_partly |= other.recorded_partly;
        self.from_snapshot |= other.from_snapshot;
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
