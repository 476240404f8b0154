//! Replaying a trace: the state that one streaming pass over the events builds, in
//! memory proportional to what is live, never to the length of the trace.
//!
//! [`ProcessModel::apply`] is the only place where events change state; the run
//! ([`crate::replay::Run::load`]) applies every event and views read the state it ends with.

mod at_peak;
mod block;
mod category;
mod device;
mod failure;
mod label;
pub mod layers;
mod off_device;
mod physical;
mod process;
mod window;

/// The hash map of the replay: keys are addresses and small ids, hashed on every event,
/// where SipHash's resistance to chosen keys buys nothing and costs a fifth of the time.
pub type Map<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;

pub use at_peak::AtReservedPeak;
pub use block::{Block, GroupKey};
pub use category::{names_a_range, Category, TensorCategories, RANGE_PREFIX};
pub use device::{DeviceUsage, GroupBytes};
pub use failure::{
    AllocatorState, DriverFigure, DriverSource, Failure, KEPT_FAILURES, RECENT_EVENTS,
};
pub use label::{Label, Metadata};
pub use layers::Change;
pub use off_device::{LocationBytes, OffDevice};
pub use process::{Counts, ProcessModel};
pub use window::Window;
