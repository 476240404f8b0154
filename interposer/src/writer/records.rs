//! The records a write needs besides events: a new stack node and its frame, and why a
//! write failed.

use super::progressed;
use crate::stack::intern::{self, NewNode};
use crate::stack::symbolize::Symbolizer;

/// The most bytes given to one write.
pub(super) const WRITE_CHUNK: usize = 1 << 20;

/// Why a write failed, in words that need no escaping in a JSON string.
pub(super) fn failure(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => "no space left on device".into(),
        Some(libc::EDQUOT) => "disk quota exceeded".into(),
        Some(libc::EFBIG) => "file size limit reached".into(),
        Some(code) => format!("os error {code}"),
        None => "short write".into(),
    }
}

/// The records a new stack node needs before the event that uses it: its frame (once per
/// address, with the names the symboliser found) and the node itself.
pub(super) fn write_node(
    text: &mut Vec<u8>,
    symbols: &mut Symbolizer,
    node: &NewNode,
    current: bool,
) {
    if node.new_ip {
        let f = if current || intern::is_python(node.ip) {
            symbols.frame(intern::address(node.ip))
        } else {
            crate::stack::symbolize::FrameInfo {
                module: "?".into(),
                offset: intern::address(node.ip),
                ..Default::default()
            }
        };
        vramtrace_schema::Frame {
            ip: node.ip,
            module: f.module,
            offset: f.offset,
            function: f.function,
            file: f.file,
            line: f.line,
            inlined: f.inlined,
        }
        .write_json(text);
        progressed();
    }
    vramtrace_schema::Node {
        id: node.id,
        parent: node.parent,
        ip: node.ip,
    }
    .write_json(text);
}
