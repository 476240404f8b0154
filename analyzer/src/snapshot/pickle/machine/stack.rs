//! The machine's stack and its marks, and the budget every object made counts against.

use super::super::{Object, Value};
use super::{Item, Machine, R};

impl Machine<'_> {
    /// Stops a file that makes more of its bytes than any snapshot does (`budget.rs`).
    pub(super) fn check_budget(&mut self) -> R<()> {
        self.check_room(0)
    }

    /// [`Self::check_budget`] with `extra` bytes about to be made: an argument or line of
    /// a gigabyte makes its copies in one opcode, between two regular checks.
    pub(super) fn check_room(&mut self, extra: usize) -> R<()> {
        let footprint = self.input.held()
            + self.made
            + self.objects.len() * size_of::<Object>()
            + self.stack.capacity() * size_of::<Item>()
            + self.memo.bytes()
            + self.marked.capacity() * size_of::<Value>()
            + self.rest.capacity() * size_of::<(Value, Value)>();
        let read = self.input.offset();
        self.budget
            .check(footprint, extra, read)
            .map_err(|msg| self.err(msg))
    }

    /// Counts what object `id` holds now, where it held `before`.
    pub(super) fn grew(&mut self, id: usize, before: usize) {
        self.made = (self.made + self.objects[id].heap_bytes()).saturating_sub(before);
    }

    pub(super) fn alloc(&mut self, o: Object) -> usize {
        self.made += o.heap_bytes();
        self.objects.push(o);
        self.objects.len() - 1
    }

    pub(super) fn push(&mut self, v: Value) {
        self.stack.push(Item::V(v));
    }

    pub(super) fn push_str(&mut self, s: String) {
        let id = self.alloc(Object::Str(s));
        self.push(Value::Str(id));
    }

    pub(super) fn pop(&mut self) -> R<Item> {
        self.stack
            .pop()
            .ok_or_else(|| self.err("an opcode wants a value and the stack is empty".into()))
    }

    pub(super) fn pop_value(&mut self) -> R<Value> {
        match self.pop()? {
            Item::V(v) => Ok(v),
            Item::Mark => Err(self.err("an opcode wants a value and found a MARK".into())),
        }
    }

    pub(super) fn peek(&self) -> R<Value> {
        match self.stack.last() {
            Some(Item::V(v)) => Ok(*v),
            Some(Item::Mark) => Err(self.err("an opcode wants a value and found a MARK".into())),
            None => Err(self.err("an opcode wants a value and the stack is empty".into())),
        }
    }

    /// Everything above the topmost MARK into `marked`, and the MARK itself, popped.
    pub(super) fn pop_mark(&mut self) -> R<()> {
        let from = self
            .stack
            .iter()
            .rposition(|i| matches!(i, Item::Mark))
            .ok_or_else(|| self.err("an opcode wants a MARK and there is none".into()))?;
        self.marked.clear();
        for item in &self.stack[from + 1..] {
            match item {
                Item::V(v) => self.marked.push(*v),
                Item::Mark => unreachable!("the topmost mark was found"),
            }
        }
        self.stack.truncate(from);
        Ok(())
    }

    pub(super) fn pop_mark_owned(&mut self) -> R<Vec<Value>> {
        self.pop_mark()?;
        Ok(self.marked.drain(..).collect())
    }

    /// `marked` as key-value pairs.
    pub(super) fn pairs(&mut self) -> R<Vec<(Value, Value)>> {
        if !self.marked.len().is_multiple_of(2) {
            return Err(self.err("a dict with an odd number of keys and values".into()));
        }
        self.hashable_keys()?;
        Ok(self.marked.chunks(2).map(|c| (c[0], c[1])).collect())
    }
}
