//! What a PyTorch snapshot file's name says: which process wrote it, for those that
//! `vramtrace run`'s hook writes beside the traces (`torch-snapshot-HOST-PID[-oom[-N]][.K].pickle`,
//! and from older versions `torch-snapshot-PID[-oom[-N]].pickle`), and a rank any name
//! may carry (`snapshot_rank3.pickle`).

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The host (None in an old name) and pid a snapshot file's name gives.
pub fn writer(name: &str) -> Option<(Option<String>, u32)> {
    let stem = name
        .strip_prefix("torch-snapshot-")?
        .strip_suffix(".pickle")?;
    // `.K`: a numbered name. A host's dots are never last: the pid follows the host.
    let stem = match stem.rsplit_once('.') {
        Some((before, k)) if digits(k).is_some() => before,
        _ => stem,
    };
    let parts: Vec<&str> = stem.split('-').collect();
    // The pid is the last part, or the one before `oom` or `oom-N`.
    let at = match parts.as_slice() {
        [.., p, "oom", n] if digits(p).is_some() && digits(n).is_some() => parts.len() - 3,
        [.., p, "oom"] if digits(p).is_some() => parts.len() - 2,
        _ => parts.len() - 1,
    };
    let pid = digits(parts[at])?;
    let host = (at > 0).then(|| parts[..at].join("-"));
    Some((host, pid))
}

/// A rank in a snapshot's file name: `rank3`, `rank_3`, `rank-3` (any case).
pub fn rank_in_name(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    let at = lower.find("rank")? + 4;
    let rest = lower[at..].trim_start_matches(['_', '-']);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!digits.is_empty()).then_some(digits)
}

#[cfg(test)]
mod tests {
    use super::{rank_in_name, writer};

    #[test]
    fn ranks_in_file_names() {
        assert_eq!(rank_in_name("snapshot_rank3.pickle").as_deref(), Some("3"));
        assert_eq!(rank_in_name("Rank-12_oom.pkl").as_deref(), Some("12"));
        assert_eq!(rank_in_name("ranking.pickle"), None);
    }
    #[test]
    fn names_new_and_old() {
        let h = |s: &str| Some(s.to_string());
        assert_eq!(
            writer("torch-snapshot-node1-42.pickle"),
            Some((h("node1"), 42))
        );
        assert_eq!(
            writer("torch-snapshot-a-b.c-42-oom.pickle"),
            Some((h("a-b.c"), 42))
        );
        assert_eq!(
            writer("torch-snapshot-n-7-42-oom-3.1.pickle"),
            Some((h("n-7"), 42))
        );
        assert_eq!(
            writer("torch-snapshot-10.0.0.5-42.2.pickle"),
            Some((h("10.0.0.5"), 42))
        );
        assert_eq!(
            writer("torch-snapshot-gpu-oom-42.pickle"),
            Some((h("gpu-oom"), 42))
        );
        assert_eq!(writer("torch-snapshot-42.pickle"), Some((None, 42)));
        assert_eq!(writer("torch-snapshot-42-oom-2.pickle"), Some((None, 42)));
        assert_eq!(writer("torch-snapshot-node1.pickle"), None);
        assert_eq!(writer("torch-42.json"), None);
    }
}
