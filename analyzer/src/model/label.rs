//! PyTorch's own labels of a tensor, read from a snapshot: the `user_metadata` its program
//! set (`torch.cuda.memory._set_memory_metadata`) when the tensor was allocated, and the
//! private pool (`torch.cuda.MemPool`, a CUDA graph's) whose segment held it, and what
//! `_annotate_tensor` said of it later. A label belongs to a stack id, as a snapshot's
//! category does: one call site allocating under two labels is two stacks, which the
//! views show as one group of that call site (split by label where asked).

use serde::{Serialize, Serializer};

/// A `user_metadata` value: a string, or a dict (its pairs by key, values as text).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metadata {
    Text(String),
    Pairs(Vec<(String, String)>),
}

impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Metadata::Text(t) => s.serialize_str(t),
            Metadata::Pairs(pairs) => s.collect_map(pairs.iter().map(|(k, v)| (k, v))),
        }
    }
}

impl Metadata {
    /// `"comm"`, `{"stage": "warmup"}`: quoted, so that no value reads as another's or as
    /// the words around it (not escaped for a terminal).
    pub fn words(&self) -> String {
        match self {
            Metadata::Text(t) => format!("{t:?}"),
            Metadata::Pairs(pairs) => {
                let pairs: Vec<String> =
                    pairs.iter().map(|(k, v)| format!("{k:?}: {v:?}")).collect();
                format!("{{{}}}", pairs.join(", "))
            }
        }
    }

    /// As one text value: the string, or the dict as JSON.
    pub fn text(&self) -> String {
        match self {
            Metadata::Text(t) => t.clone(),
            Metadata::Pairs(_) => serde_json::to_string(self).unwrap_or_default(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Label {
    /// The entry's `user_metadata`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<Metadata>,
    /// The segment's `segment_pool_id`, where it is not the default pool's `(0, 0)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<(i64, i64)>,
    /// What the program said of the tensor after it was allocated
    /// (`torch.cuda.memory._annotate_tensor`: `annotate` entries), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<Metadata>,
}

impl Label {
    pub fn is_empty(&self) -> bool {
        self.user_metadata.is_none() && self.pool.is_none() && self.annotations.is_empty()
    }

    /// `user_metadata "comm", private pool (1, 0), annotated "kept"`: for one line of
    /// text (not escaped).
    pub fn words(&self) -> String {
        let metadata = self
            .user_metadata
            .as_ref()
            .map(|m| format!("user_metadata {}", m.words()));
        let pool = self
            .pool
            .map(|(owner, id)| format!("private pool ({owner}, {id})"));
        let annotations = (!self.annotations.is_empty()).then(|| {
            let quoted: Vec<String> = self.annotations.iter().map(Metadata::words).collect();
            format!("annotated {}", quoted.join(", "))
        });
        metadata
            .into_iter()
            .chain(pool)
            .chain(annotations)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_name_what_is_known() {
        let both = Label {
            user_metadata: Some(Metadata::Text("comm".into())),
            pool: Some((1, 0)),
            ..Label::default()
        };
        assert_eq!(both.words(), "user_metadata \"comm\", private pool (1, 0)");
        let pool = Label {
            pool: Some((2, 5)),
            ..Label::default()
        };
        assert_eq!(pool.words(), "private pool (2, 5)");
        let annotated = Label {
            annotations: vec![
                Metadata::Text("kept".into()),
                Metadata::Pairs(vec![("a".into(), "x\"y".into())]),
            ],
            ..Label::default()
        };
        assert_eq!(annotated.words(), r#"annotated "kept", {"a": "x\"y"}"#);
        assert!(Label::default().is_empty());
        assert!(!pool.is_empty());
    }
}
