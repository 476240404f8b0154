//! The record of a marker's name.

use serde::{Deserialize, Serialize};

/// `{"name":{"id":N,"text":"..."}}`: a marker name (`vramtrace.mark`, `vramtrace.phase`,
/// the C annotation API), written once, before the first marker event using it; events
/// carry the id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Name {
    pub id: u64,
    pub text: String,
}

impl Name {
    /// The record and its newline.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"name\":");
        // A struct of a number and a string: serde_json cannot fail on it.
        let _ = serde_json::to_writer(&mut *out, self);
        out.extend_from_slice(b"}\n");
    }
}
