//! The post-mortem's verdict in plain words, and what to try.

use super::groups::Group;
use super::oom::{Figures, Verdict};
use crate::units::bytes;

pub fn explain(v: Verdict, f: &Figures, untraced: Option<u64>, groups: &[Group]) -> String {
    let top = groups
        .first()
        .map(|g| {
            format!(
                " (the most, {}, in {} from {})",
                bytes(g.bytes),
                crate::units::count(g.blocks, "block"),
                g.api
            )
        })
        .unwrap_or_default();
    let untraced = untraced.unwrap_or(0);
    match v {
        Verdict::NeverFits => format!(
            "It could never have fitted: {} is more than the whole device ({}).",
            bytes(f.requested),
            bytes(f.driver.map_or(0, |d| d.1))
        ),
        Verdict::HeldElsewhere => format!(
            "Memory was held elsewhere: even with all {} of this process's memory freed, only {} would have been free, because other traced processes held {} and {} was taken by memory vramtrace does not see (CUDA contexts, libraries, other programs).",
            bytes(f.own),
            bytes(f.driver.map_or(0, |d| d.1).saturating_sub(untraced + f.others)),
            bytes(f.others),
            bytes(untraced)
        ),
        Verdict::HeldByThisProcess => format!(
            "This process's own memory took the room: it held {}{top}, and {} more did not fit in what was left ({} held elsewhere: {} by other traced processes, {} not seen by vramtrace).",
            bytes(f.own),
            bytes(f.requested),
            bytes(f.others + untraced),
            bytes(f.others),
            bytes(untraced)
        ),
        Verdict::ShouldHaveFit => format!(
            "By the figures it should have fitted: {} held by this process{top}, {} by other traced processes and {} not seen by vramtrace leave room for {}. The free memory may have been fragmented, or taken since the driver last reported by something vramtrace does not see.",
            bytes(f.own),
            bytes(f.others),
            bytes(untraced),
            bytes(f.requested)
        ),
        // Explained from the allocator's state by `fragmented`; without it, the figures.
        Verdict::Fragmentation => format!(
            "The allocator's free memory was fragmented: {} did not fit in any free block.",
            bytes(f.requested)
        ),
        Verdict::CapacityUnknown => match f.free_alone {
            Some(free) => format!(
                "This process held {}{top} and other traced processes {}; the driver had {} free for the {} asked, but did not say of how much, so what else held the device is not in the trace.",
                bytes(f.own),
                bytes(f.others),
                bytes(free),
                bytes(f.requested)
            ),
            None => format!(
                "This process held {}{top} and other traced processes {}; the program never asked the driver how much was free (cuMemGetInfo), so the device's capacity is not in the trace.",
                bytes(f.own),
                bytes(f.others)
            ),
        },
        Verdict::NotDeviceMemory => format!(
            "The request ({}) was for memory that is not on the device (page-locked host memory, or a managed pool's), so the device's figures do not explain it: the host could not give it.",
            bytes(f.requested)
        ),
    }
}

/// The fragmentation verdict, from the allocator's annotated blocks. With expandable
/// segments the free pieces lie in mapped pages; address space reserved but not mapped
/// is no memory at all, so it is named apart and never counted as cached.
pub fn fragmented(requested: u64, a: &crate::model::AllocatorState) -> String {
    let pieces = if a.expandable_segments {
        "free pieces of mapped pages (expandable segments)"
    } else {
        "free pieces"
    };
    let unmapped = match a.unmapped_bytes {
        Some(u) if a.expandable_segments && u > 0 => format!(
            "; a further {} of address space was reserved but unmapped, which is no memory",
            bytes(u)
        ),
        _ => String::new(),
    };
    format!(
        "Fragmentation: the request ({}) was larger than the largest free block ({}) while {} was cached in {} {pieces}; the allocator held {} in use{unmapped}.",
        bytes(requested),
        bytes(a.largest_free_block_bytes),
        bytes(a.cached_free_bytes),
        a.free_blocks,
        bytes(a.allocated_bytes)
    )
}

/// The setting named in advice, and what is said instead where it was already on.
const EXPANDABLE: &str = "expandable_segments:True";
const EXPANDABLE_ON: &str = "PYTORCH_CUDA_ALLOC_CONF already had expandable_segments:True (the recorded settings): the cache maps pages into segments that grow, so the room was short by the figures above, not by the layout of fixed segments";

/// What to try; `expandable` is whether expandable segments were on, where the recording
/// says (a snapshot's settings, the traced process's PYTORCH_CUDA_ALLOC_CONF). Advice
/// never proposes a setting that was on.
pub fn advice(v: Verdict, expandable: bool) -> Vec<String> {
    let list: &[&str] = match v {
        Verdict::Fragmentation => &[
            "with PyTorch, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True maps new pages into one segment instead of carving fixed ones",
            "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N keeps large cached blocks from being split for small requests",
            "allocate the largest, longest-lived buffers first; torch.cuda.empty_cache() returns cached segments to the driver",
        ],
        Verdict::NeverFits => &[
            "make this one allocation smaller: a smaller batch or sequence length, or split the tensor",
            "shard it across devices (tensor or pipeline parallelism, FSDP/ZeRO) or offload to host memory",
            "use a device with more memory",
        ],
        Verdict::HeldElsewhere => &[
            "look at what else runs on this GPU (nvidia-smi); give each process its own GPU with CUDA_VISIBLE_DEVICES",
            "lower what the other processes hold, or start this one first",
            "memory not seen by vramtrace includes each process's CUDA context and library workspaces (cuBLAS, cuDNN, NCCL)",
        ],
        Verdict::HeldByThisProcess => &[
            "free what is no longer needed before this point: the largest groups above are the place to start (`vramtrace peak --at` shows the live set at any moment)",
            "a smaller batch, activation checkpointing, or lower precision (bf16/fp16) shrink what grows with the batch",
            "with PyTorch, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces memory held by the cache",
        ],
        Verdict::ShouldHaveFit => &[
            "with PyTorch, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True avoids fragmented free memory",
            "allocate the largest buffers first and reuse them rather than allocating sizes that change every step",
            "check for memory taken by other programs since the last cuMemGetInfo (nvidia-smi)",
        ],
        Verdict::NotDeviceMemory => &[
            "page-locked host memory comes out of the host's RAM and its locked-memory limit (ulimit -l, a container's memory limit): check both",
            "pin less at once: smaller host staging buffers, or pageable memory where copy speed does not matter",
        ],
        Verdict::CapacityUnknown => &[
            "the largest groups above are what to free or shrink first",
            "a smaller batch, activation checkpointing, or lower precision shrink what grows with the batch",
        ],
    };
    let mut out = Vec::new();
    for s in list {
        if !(expandable && s.contains(EXPANDABLE)) {
            out.push(s.to_string());
        } else if !out.iter().any(|o: &String| o == EXPANDABLE_ON) {
            out.push(EXPANDABLE_ON.to_string());
        }
    }
    out
}
