//! Which layer a view answers at: tensors (the allocated layer) where the run knows them,
//! device memory from the driver (the reserved layer) otherwise, or the one asked for with
//! `--layer`. Every view that picks one says which it picked.

use crate::replay::Run;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Layer {
    /// Tensors (blocks handed out inside reserved memory), by requested bytes.
    Allocated,
    /// Device memory held from the driver.
    Reserved,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Allocated => "allocated",
            Layer::Reserved => "reserved",
        }
    }

    /// The layer a view of `run` answers at: `asked`, or by default the allocated layer
    /// where the run has one. Allocated asked of a run without one is the reserved layer
    /// (the views say which they show).
    pub fn of(run: &Run, asked: Option<Layer>) -> Layer {
        match asked {
            Some(Layer::Reserved) => Layer::Reserved,
            _ if has_tensors(run) => Layer::Allocated,
            _ => Layer::Reserved,
        }
    }
}

/// Whether some process of `run` has an allocated layer: an allocator annotated its
/// blocks, or a PyTorch snapshot gave its tensors.
pub fn has_tensors(run: &Run) -> bool {
    run.processes
        .iter()
        .any(|p| p.layers.devices.values().any(|l| l.annotated))
}

/// The words for a view's figures at `layer`.
pub fn describe(layer: Layer) -> &'static str {
    match layer {
        Layer::Allocated => "tensors (allocated layer, requested bytes)",
        Layer::Reserved => "device memory (reserved layer)",
    }
}
