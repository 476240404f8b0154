//! PyTorch's own labels of a tensor, read from a snapshot: the `user_metadata` its program
//! set (`torch.cuda.memory._set_memory_metadata`) when the tensor was allocated, and the
//! private pool (`torch.cuda.MemPool`, a CUDA graph's) whose segment held it. A label
//! belongs to a stack id, as a snapshot's category does: one call site allocating under
//! two labels is two stacks, and two groups.

use serde::Serialize;

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Label {
    /// The entry's `user_metadata`, as the file wrote it (a dict of strings as
    /// `key=value` pairs joined by `, `).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<String>,
    /// The segment's `segment_pool_id`, where it is not the default pool's `(0, 0)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<(i64, i64)>,
    /// What the program said of the tensor after it was allocated
    /// (`torch.cuda.memory._annotate_tensor`: `annotate` entries), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<String>,
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
            .map(|m| format!("user_metadata \"{m}\""));
        let pool = self
            .pool
            .map(|(owner, id)| format!("private pool ({owner}, {id})"));
        let annotations = (!self.annotations.is_empty()).then(|| {
            let quoted: Vec<String> = self
                .annotations
                .iter()
                .map(|a| format!("\"{a}\""))
                .collect();
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
            user_metadata: Some("comm".into()),
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
            annotations: vec!["kept".into(), "saved".into()],
            ..Label::default()
        };
        assert_eq!(annotated.words(), "annotated \"kept\", \"saved\"");
        assert!(Label::default().is_empty());
        assert!(!pool.is_empty());
    }
}
