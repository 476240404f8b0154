//! Lists, dicts and the memo: filling containers, reading history entries in one
//! step, and the checks Python's pickle makes on keys.

use super::super::entry;
use super::super::fast;
use super::super::{Object, Value};
use super::{Machine, R};

impl Machine<'_> {
    /// Refuses a key of `marked`'s pairs that Python cannot hash (a list, a dict, or a
    /// tuple holding one), where Python's pickle refuses the file.
    pub(super) fn hashable_keys(&self) -> R<()> {
        for pair in self.marked.chunks_exact(2) {
            if let Some(what) = self.unhashable(pair[0]) {
                return Err(self.err(format!(
                    "a dict key that is {what}: unhashable, so Python's pickle cannot load \
                     this file either"
                )));
            }
        }
        Ok(())
    }

    /// What makes `key` unhashable, if anything. A tuple is looked into up to 1,000
    /// items (a key is no deeper in any real file); past them it is taken as hashable.
    /// A set is taken as a frozenset (hashable): both are read as `Value::Set`.
    pub(super) fn unhashable(&self, key: Value) -> Option<&'static str> {
        let mut todo = match key {
            Value::List(_) => return Some("a list"),
            Value::Dict(_) => return Some("a dict"),
            Value::Tuple(_) => vec![key],
            _ => return None,
        };
        let mut looked = 0;
        while let Some(v) = todo.pop() {
            match v {
                Value::List(_) => return Some("a tuple holding a list"),
                Value::Dict(_) => return Some("a tuple holding a dict"),
                Value::Tuple(id) => {
                    let Object::Seq(items) = &self.objects[id] else {
                        continue;
                    };
                    looked += items.len();
                    if looked > 1000 {
                        return None;
                    }
                    todo.extend_from_slice(items);
                }
                _ => {}
            }
        }
        None
    }

    /// Appends `marked` to a list or set; dicts appended to a list that are history
    /// entries are kept compact.
    pub(super) fn extend_seq(&mut self, target: Value) -> R<()> {
        let (id, list) = match target {
            Value::List(id) => (id, true),
            Value::Set(id) => (id, false),
            _ => return Err(self.err("APPEND or ADDITEMS on something not a list or set".into())),
        };
        if list {
            for i in 0..self.marked.len() {
                if let Value::Dict(d) = self.marked[i] {
                    self.compact(d);
                }
            }
        }
        let before = self.objects[id].heap_bytes();
        match &mut self.objects[id] {
            Object::Seq(v) => v.extend_from_slice(&self.marked),
            _ => unreachable!("list ids name sequences"),
        }
        self.grew(id, before);
        Ok(())
    }

    /// Dict `id` as an [`entry::Entry`] if it is a history entry.
    pub(super) fn compact(&mut self, id: usize) {
        let Object::Dict(pairs) = &self.objects[id] else {
            return;
        };
        if pairs.len() > 16 {
            return;
        }
        let Some(e) = entry::compact(
            &self.objects,
            &mut self.entry_keys,
            &mut self.key_order,
            pairs.iter().copied(),
            &mut self.rest,
        ) else {
            return;
        };
        if let Some(e) = self.with_rest(e) {
            let dict = std::mem::replace(&mut self.objects[id], Object::Entry(e));
            self.made = self.made.saturating_sub(dict.heap_bytes());
        }
    }

    /// `e` with the pairs `compact` left in `rest` as a dict of its own.
    pub(super) fn with_rest(&mut self, mut e: entry::Entry) -> Option<entry::Entry> {
        if !self.rest.is_empty() {
            let rest = self.alloc(Object::Dict(self.rest.clone()));
            e.set_rest(rest)?;
        }
        Some(e)
    }

    /// SETITEMS filling empty dict `id` with `marked`: an entry if it is one.
    pub(super) fn compact_marked(&mut self, id: usize) -> bool {
        let empty = matches!(&self.objects[id], Object::Dict(d) if d.is_empty());
        if !empty || self.marked.len() > 32 {
            return false;
        }
        let pairs = self.marked.chunks_exact(2).map(|c| (c[0], c[1]));
        let Some(e) = entry::compact(
            &self.objects,
            &mut self.entry_keys,
            &mut self.key_order,
            pairs,
            &mut self.rest,
        ) else {
            return false;
        };
        match self.with_rest(e) {
            Some(e) => {
                self.objects[id] = Object::Entry(e);
                true
            }
            None => false,
        }
    }

    pub(super) fn extend_dict(&mut self, target: Value, setitems: bool) -> R<()> {
        let Value::Dict(id) = target else {
            return Err(self.err("SETITEM on something not a dict".into()));
        };
        if !self.marked.len().is_multiple_of(2) {
            return Err(self.err("a dict with an odd number of keys and values".into()));
        }
        self.hashable_keys()?;
        if setitems && self.compact_marked(id) {
            return Ok(());
        }
        // An entry written to after it was appended (only a crafted file does): a dict again.
        let expanded = match &self.objects[id] {
            Object::Entry(e) => {
                let rest = match e.rest().map(|r| &self.objects[r]) {
                    Some(Object::Dict(d)) => d.as_slice(),
                    _ => &[],
                };
                Some(e.pairs(&self.entry_keys, rest))
            }
            _ => None,
        };
        let before = self.objects[id].heap_bytes();
        if let Some(pairs) = expanded {
            self.objects[id] = Object::Dict(pairs);
        }
        match &mut self.objects[id] {
            Object::Dict(d) => d.extend(self.marked.chunks_exact(2).map(|c| (c[0], c[1]))),
            _ => unreachable!("dict ids name dicts"),
        }
        self.grew(id, before);
        Ok(())
    }

    /// The `EMPTY_DICT` just read and what follows it, read in one step where it is a
    /// history entry as `fast.rs` knows it: the same objects, memo and stack as the
    /// opcodes one by one would leave. False, with nothing read, where it is not one.
    pub(super) fn entry(&mut self) -> bool {
        let scanned;
        let raw = if self.input.is_ahead() {
            self.input.raw_at(self.at)
        } else {
            scanned = fast::scan(self.input.peek(fast::MAX_BYTES), self.at);
            scanned.as_ref()
        };
        let Some(raw) = raw else {
            return false;
        };
        let len = raw.len();
        let id = self.objects.len();
        let Some(r) = fast::resolve(raw, &self.memo, &self.entry_keys, &self.key_order, id) else {
            return false;
        };
        // The bytes scanned are the stream's from here (read ahead, they may not all be
        // in the window yet). Object ids past 2^28 may not be put in the memo at once
        // (its side table can be full): an entry with a string of its own is left to the
        // machine there, so that nothing is put unless everything is.
        if self.input.peek(len).len() < len || (r.literal.is_some() && id + 1 >= 1 << 28) {
            return false;
        }
        // The dict's id is the next object's, its string's the one after.
        if let Some(i) = r.put {
            if !self.memo.set(i, Value::Dict(id)) {
                return false;
            }
        }
        if let Some((_, Some(i))) = &r.literal {
            self.memo.set(*i, Value::Str(id + 1));
        }
        self.input.advance(len);
        self.alloc(Object::Entry(r.entry));
        if let Some((text, _)) = r.literal {
            self.alloc(Object::Str(text));
        }
        self.push(Value::Dict(id));
        self.entries_in_one_step += 1;
        true
    }

    pub(super) fn get(&mut self, i: usize) -> R<()> {
        match self.memo.get(i) {
            Some(v) => {
                self.push(v);
                Ok(())
            }
            None => Err(self.err(format!("memo entry {i} read before it was written"))),
        }
    }

    pub(super) fn put(&mut self, i: usize) -> R<()> {
        let v = self.peek()?;
        if self.memo.set(i, v) {
            Ok(())
        } else {
            Err(self.err("more memo entries than a pickle of this size holds".into()))
        }
    }
}
