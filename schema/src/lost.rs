//! The record of calls the interposer could not record.

use serde::{Deserialize, Serialize};

/// `{"lost":{"t":T,"calls":N}}`: `calls` intercepted calls since the previous such record
/// were not recorded, because the interposer's queue was at its bound and its writer made
/// no progress (see `docs/host.md`). Written before the events of the batch that follows
/// the loss; readers add them up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lost {
    /// When the writer noticed, as in [`crate::Event::t`].
    pub t: u64,
    pub calls: u64,
}

impl Lost {
    pub fn write_json(&self, out: &mut crate::JsonBuf) {
        out.raw("{\"lost\":{\"t\":");
        out.u64(self.t);
        out.raw(",\"calls\":");
        out.u64(self.calls);
        out.raw("}}\n");
    }
}
