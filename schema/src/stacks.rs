//! Stack records: frames (one per return address, with the names the interposer found)
//! and the trie nodes that events point at.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// `{"frame":{...}}`: one return address, written before the first node that uses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub ip: u64,
    /// Path of the executable or library.
    pub module: String,
    /// Address within the module's file address space.
    pub offset: u64,
    /// Demangled function name, where the module has symbols.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Source file and line, where the module has debug information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Calls the compiler inlined at this address, innermost first: each was made from the
    /// next one, the last from `function` (whose `file`/`line` is then that call's site).
    /// They have no frame of their own at run time; the debug information keeps them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inlined: Vec<Inlined>,
}

impl Frame {
    /// The record and its newline.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"frame\":");
        // Numbers, strings and lists of them: serde_json cannot fail on these.
        let _ = serde_json::to_writer(&mut *out, self);
        out.extend_from_slice(b"}\n");
    }
}

/// A function inlined at a frame's address, and the line it was at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inlined {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// One call of a stack: a frame's own function, or a function inlined into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call<'a> {
    pub frame: &'a Frame,
    pub function: Option<&'a str>,
    pub file: Option<&'a str>,
    pub line: Option<u32>,
    /// Inlined into the next call outward: no frame of its own at run time.
    pub inlined: bool,
}

/// `{"node":{"id":N,"parent":P,"ip":X}}`: the stack `parent` with frame `ip` called from it
/// (`parent` 0 is the root). An event's `stack` is its innermost node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub id: u64,
    pub parent: u64,
    pub ip: u64,
}

impl Node {
    /// The record and its newline, formatted by hand: a first write names every stack.
    pub fn write_json<O: crate::JsonOut>(&self, out: &mut O) {
        out.raw("{\"node\":{\"id\":");
        out.u64(self.id);
        out.raw(",\"parent\":");
        out.u64(self.parent);
        out.raw(",\"ip\":");
        out.u64(self.ip);
        out.raw("}}\n");
    }
}

/// Frames a stack may have. The interposer writes at most 128 return addresses, Python
/// frames taking the place of the interpreter's own among them; readers refuse deeper
/// chains of nodes, which would make every view that prints a stack print thousands.
pub const MAX_STACK_DEPTH: usize = 256;

/// Every frame and node of a trace, in memory proportional to the distinct stacks.
#[derive(Clone, Debug, Default)]
pub struct StackTable {
    frames: HashMap<u64, Frame>,
    nodes: HashMap<u64, (u64, u64)>,
}

impl StackTable {
    pub fn add_frame(&mut self, frame: Frame) {
        self.frames.insert(frame.ip, frame);
    }

    pub fn add_node(&mut self, node: Node) {
        self.nodes.insert(node.id, (node.parent, node.ip));
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Adds every frame and node of `other`, whose ids and addresses must not be this
    /// table's (a PyTorch snapshot's stacks joining its process's trace take ids of their
    /// own).
    pub fn merge(&mut self, other: StackTable) {
        self.frames.extend(other.frames);
        self.nodes.extend(other.nodes);
    }

    /// Return addresses of `stack`, innermost first (empty for stack 0 or an unknown id).
    pub fn ips(&self, stack: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let mut id = stack;
        while id != 0 {
            let Some(&(parent, ip)) = self.nodes.get(&id) else {
                break;
            };
            out.push(ip);
            // A corrupt trace could hold a cycle (a node id written again with another
            // parent): no stack is deeper than the nodes, nor than a stack may be.
            if out.len() > self.nodes.len() || out.len() >= MAX_STACK_DEPTH {
                break;
            }
            id = parent;
        }
        out
    }

    pub fn frame(&self, ip: u64) -> Option<&Frame> {
        self.frames.get(&ip)
    }

    /// The frames of `stack`, innermost first; addresses without a frame record are skipped.
    pub fn frames(&self, stack: u64) -> Vec<&Frame> {
        self.ips(stack)
            .into_iter()
            .filter_map(|ip| self.frame(ip))
            .collect()
    }

    /// The calls of `stack`, innermost first: each frame's inlined calls, then its own.
    pub fn calls(&self, stack: u64) -> Vec<Call<'_>> {
        self.frames(stack)
            .into_iter()
            .flat_map(Frame::calls)
            .collect()
    }
}

impl Frame {
    /// The calls this frame stands for, innermost first: the inlined ones, then its own.
    pub fn calls(&self) -> impl Iterator<Item = Call<'_>> {
        let inlined = self.inlined.iter().map(move |i| Call {
            frame: self,
            function: i.function.as_deref(),
            file: i.file.as_deref(),
            line: i.line,
            inlined: true,
        });
        inlined.chain(std::iter::once(Call {
            frame: self,
            function: self.function.as_deref(),
            file: self.file.as_deref(),
            line: self.line,
            inlined: false,
        }))
    }
}

impl Call<'_> {
    /// `function (file:line)`, or `module+0xoffset` without symbols; ` [inlined]` after
    /// a call the compiler inlined.
    pub fn describe(&self) -> String {
        let module = self
            .frame
            .module
            .rsplit('/')
            .next()
            .unwrap_or(&self.frame.module);
        let text = match (self.function, self.file, self.line) {
            (Some(f), Some(file), Some(line)) => {
                let file = file.rsplit('/').next().unwrap_or(file);
                format!("{f} ({file}:{line})")
            }
            (Some(f), _, _) => format!("{f} ({module})"),
            _ => format!("{module}+{:#x}", self.frame.offset),
        };
        if self.inlined {
            text + " [inlined]"
        } else {
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_follow_parents_to_the_root() {
        let mut t = StackTable::default();
        t.add_node(Node {
            id: 1,
            parent: 0,
            ip: 10,
        });
        t.add_node(Node {
            id: 2,
            parent: 1,
            ip: 20,
        });
        t.add_node(Node {
            id: 3,
            parent: 2,
            ip: 30,
        });
        assert_eq!(t.ips(3), vec![30, 20, 10]);
        assert_eq!(t.ips(0), Vec::<u64>::new());
        assert_eq!(t.ips(99), Vec::<u64>::new());
    }

    #[test]
    fn a_frame_expands_into_its_inlined_calls_innermost_first() {
        let with: Frame = serde_json::from_str(
            r#"{"ip":7,"module":"/a","offset":6,"function":"outer","file":"a.c","line":9,
                "inlined":[{"function":"inner","file":"b.h","line":3},{"function":"mid"}]}"#,
        )
        .unwrap();
        let calls: Vec<(Option<&str>, Option<u32>, bool)> = with
            .calls()
            .map(|c| (c.function, c.line, c.inlined))
            .collect();
        assert_eq!(
            calls,
            [
                (Some("inner"), Some(3), true),
                (Some("mid"), None, true),
                (Some("outer"), Some(9), false)
            ]
        );
        assert_eq!(
            with.calls().next().unwrap().describe(),
            "inner (b.h:3) [inlined]"
        );
        // A frame written before inlined calls were recorded is one call.
        let without: Frame =
            serde_json::from_str(r#"{"ip":7,"module":"/a","offset":6,"function":"f"}"#).unwrap();
        assert_eq!(without.calls().count(), 1);
        assert!(!serde_json::to_string(&without).unwrap().contains("inlined"));
    }

    #[test]
    fn a_cycle_in_a_corrupt_trace_ends() {
        let mut t = StackTable::default();
        t.add_node(Node {
            id: 1,
            parent: 2,
            ip: 10,
        });
        t.add_node(Node {
            id: 2,
            parent: 1,
            ip: 20,
        });
        assert!(t.ips(1).len() <= 3);
    }
}
