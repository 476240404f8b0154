//! A snapshot's frames as the trace's stack table: each distinct frame a node once, each
//! frame list (PyTorch's pickler shares one list per distinct stack) a stack id once,
//! however many entries share it. A stack id also names one category
//! ([`super::category`]) and one label (`user_metadata`, a private pool): stacks that read
//! alike but were allocated for different ends (the frames the views leave out differ) or
//! under different labels are different stacks.

use super::frames::{head, readable};
use super::history::FrameReader;
use super::model::Frame;
use super::pickle::{Pickle, Value};
use crate::model::{Category, Label, Map};
use vramtrace_schema::{Node, StackTable};

/// Distinct labels kept at most: a program that writes a new `user_metadata` for every
/// tensor would make a stack per tensor.
pub const MOST_LABELS: u64 = 10_000;

pub struct StackIds {
    /// Added to every frame address and stack id: 0 for a snapshot of its own, a base
    /// clear of a trace's ids for one joining its process's trace.
    base: u64,
    pub stacks: StackTable,
    frames: Map<(String, i64, String), u64>,
    nodes: Map<(u64, u64), u64>,
    /// Frames and nodes made so far: their ids, which stay unique when the maps above
    /// are dropped ([`StackIds::done_reading`]).
    frames_made: u64,
    nodes_made: u64,
    /// Stack ids by frame list (its object in the pickle) and label.
    lists: Map<(usize, u64), u64>,
    /// Each stack id's category (a stack without frames, id 0, has none: not known).
    pub categories: Map<u64, Category>,
    /// Categories of stacks made since [`StackIds::learn_categories`] last took them.
    fresh: Vec<(u64, Category)>,
    /// Each labelled stack's label.
    pub labels: Map<u64, Label>,
    /// The labels met, each its number from 1 (0: none), at most [`MOST_LABELS`].
    label_ids: Map<Label, u64>,
    /// Allocations whose label was left out: past [`MOST_LABELS`] distinct ones.
    pub labels_left_out: u64,
    reader: FrameReader,
    all_frames: bool,
}

impl StackIds {
    pub fn new(base: u64, all_frames: bool) -> StackIds {
        StackIds {
            base,
            stacks: StackTable::default(),
            frames: Map::default(),
            nodes: Map::default(),
            frames_made: 0,
            nodes_made: 0,
            lists: Map::default(),
            categories: Map::default(),
            fresh: Vec::new(),
            labels: Map::default(),
            label_ids: Map::default(),
            labels_left_out: 0,
            reader: FrameReader::default(),
            all_frames,
        }
    }

    /// The number of `label` (0: none), and the label it stands for: past [`MOST_LABELS`],
    /// a new label keeps its pool alone (a pool is a final segment's: there are few), and
    /// what it said besides is left out, counted.
    fn label_id(&mut self, label: Label) -> (u64, Label) {
        let full = self.label_ids.len() as u64 >= MOST_LABELS;
        let label = if full && !label.is_empty() && !self.label_ids.contains_key(&label) {
            let pool = Label {
                pool: label.pool,
                ..Label::default()
            };
            self.labels_left_out += u64::from(pool != label);
            pool
        } else {
            label
        };
        if label.is_empty() {
            return (0, label);
        }
        let next = self.label_ids.len() as u64 + 1;
        let id = *self.label_ids.entry(label.clone()).or_insert(next);
        (id, label)
    }

    /// The stack id of `frames` (innermost first), reduced to what a person reads, under
    /// `label`.
    pub fn stack(&mut self, frames: &[Frame], label: Label) -> u64 {
        let (id, label) = self.label_id(label);
        self.stack_labelled(frames, id, label)
    }

    fn stack_labelled(&mut self, frames: &[Frame], label_id: u64, label: Label) -> u64 {
        let category = super::category::infer(frames);
        let mut shown = readable(frames, self.all_frames);
        if shown.is_empty() {
            // No operator and no Python frame (the autograd engine's thread has none):
            // a few of its frames, so that the stack and its category are kept.
            shown = super::frames::fallback(frames);
        }
        // The outermost node is keyed by its category and label too, so a stack id has one
        // of each (stacks that read alike but were allocated for different ends are apart;
        // the views show them as one group); no node has an id this high.
        let root = u64::MAX - (label_id * 8 + category as u64);
        let mut node = 0;
        for r in shown.iter().rev() {
            let (file, name) = (r.filename.map(head), head(&r.name));
            let key = (file.unwrap_or("").to_string(), r.line, name.to_string());
            let next_ip = self.base + self.frames_made + 1;
            let ip = *self.frames.entry(key).or_insert_with(|| {
                self.frames_made += 1;
                self.stacks.add_frame(vramtrace_schema::Frame {
                    ip: next_ip,
                    module: if r.python { "python" } else { "operator" }.into(),
                    offset: 0,
                    function: Some(name.to_string()),
                    file: file.map(str::to_string),
                    line: u32::try_from(r.line).ok(),
                    inlined: Vec::new(),
                });
                next_ip
            });
            let next_id = self.base + self.nodes_made + 1;
            let parent = if node == 0 { root } else { node };
            node = *self.nodes.entry((parent, ip)).or_insert_with(|| {
                self.nodes_made += 1;
                self.stacks.add_node(Node {
                    id: next_id,
                    parent: node,
                    ip,
                });
                next_id
            });
        }
        if node == 0 && label_id != 0 {
            // No frame to show (history recorded without stacks): the root alone stands
            // for the label, with no frames and no category, as stack 0 has none.
            node = root;
            if self.labels.insert(node, label).is_none() {
                self.categories.insert(node, Category::Unknown);
                self.fresh.push((node, Category::Unknown));
            }
            return node;
        }
        if node != 0 && self.categories.insert(node, category).is_none() {
            self.fresh.push((node, category));
            if label_id != 0 {
                self.labels.insert(node, label);
            }
        }
        node
    }

    /// Adds to `into` the categories of the stacks made since the last call: a replay
    /// knows each tensor's category as its event is applied (the timeline splits the
    /// tensors by category over time).
    pub fn learn_categories(&mut self, into: &mut Map<u64, Category>) {
        into.extend(self.fresh.drain(..));
    }

    /// Every frame list read: what reading them needed is dropped (the stack table and the
    /// categories stay). A list read after this would be read again, under new ids.
    pub fn done_reading(&mut self) {
        self.frames = Map::default();
        self.nodes = Map::default();
        self.lists = Map::default();
        self.reader = FrameReader::default();
    }

    /// The stack id of frame list `v` under `label`, read once per list and label.
    pub fn stack_of(&mut self, p: &Pickle, v: Option<Value>, label: Label) -> u64 {
        let (label_id, label) = self.label_id(label);
        let id = match v {
            Some(Value::List(id) | Value::Tuple(id)) => id,
            _ => return self.stack_labelled(&[], label_id, label),
        };
        if let Some(&s) = self.lists.get(&(id, label_id)) {
            return s;
        }
        let frames = self.reader.frames(p, v);
        let s = self.stack_labelled(&frames, label_id, label);
        self.lists.insert((id, label_id), s);
        s
    }
}
