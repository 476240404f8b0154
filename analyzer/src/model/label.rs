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
}

impl Label {
    pub fn is_empty(&self) -> bool {
        self.user_metadata.is_none() && self.pool.is_none()
    }

    /// `user_metadata "comm", private pool (1, 0)`: for one line of text (not escaped).
    pub fn words(&self) -> String {
        let metadata = self
            .user_metadata
            .as_ref()
            .map(|m| format!("user_metadata \"{m}\""));
        let pool = self
            .pool
            .map(|(owner, id)| format!("private pool ({owner}, {id})"));
        metadata
            .into_iter()
            .chain(pool)
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
        };
        assert_eq!(both.words(), "user_metadata \"comm\", private pool (1, 0)");
        let pool = Label {
            pool: Some((2, 5)),
            ..Label::default()
        };
        assert_eq!(pool.words(), "private pool (2, 5)");
        assert!(Label::default().is_empty());
        assert!(!pool.is_empty());
    }
}
