//! Which frames of a stack a person needs to see: the program's own, not the CUDA
//! libraries', libc's start-up or the allocator's internals (`--all-frames` keeps all);
//! the top few inline in text views (`--full-stack` shows every one).

use serde::Serialize;
use vramtrace_schema::{Call, StackTable};

/// Frames shown inline in text views unless `--full-stack`.
const INLINE_FRAMES: usize = 3;

/// One frame as views show it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ShownFrame {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    pub module: String,
    /// A call the compiler inlined into the next frame outward.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub inlined: bool,
    #[serde(skip)]
    pub(crate) text: String,
}

/// Libraries whose frames are machinery, not the program's code.
const MACHINERY_MODULES: &[&str] = &[
    "libcuda.so",
    "libcudart.so",
    "libvramtrace.so",
    "libc.so",
    "ld-linux",
    "libffi.so",
    "libstdc++.so",
    "libgcc_s.so",
];

/// Functions that are start-up, threading or allocator internals.
const MACHINERY_FUNCTIONS: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "start_thread",
    "clone",
    "clone3",
    "c10::cuda::CUDACachingAllocator",
    "c10::cuda::c10_cuda_check",
];

/// Whether a module (its path) is machinery: the CUDA libraries, vramtrace's, libc's, and
/// the Python interpreter's native code (below its Python frames, or ctypes' calls).
pub fn is_machinery_module(path: &str) -> bool {
    let module = path.rsplit('/').next().unwrap_or(path);
    MACHINERY_MODULES.iter().any(|m| module.starts_with(m))
        || module.starts_with("libpython")
        || module.starts_with("python3")
        || module.starts_with("_ctypes")
}

fn is_machinery(f: &Call) -> bool {
    let module = f.frame.module.rsplit('/').next().unwrap_or(&f.frame.module);
    if is_machinery_module(module) {
        return true;
    }
    let function = f.function.unwrap_or("");
    if MACHINERY_FUNCTIONS
        .iter()
        .any(|m| function == *m || function.starts_with(&format!("{m}::")))
    {
        return true;
    }
    // The annotation helpers of vramtrace.h, inlined into the allocator that calls them.
    if function.starts_with("vramtrace_") {
        return true;
    }
    false
}

/// The frames of `stack` to show, innermost first, with the calls inlined at each.
pub fn shown(stacks: &StackTable, stack: u64) -> Vec<ShownFrame> {
    let all = crate::frame_options::all_frames();
    stacks
        .calls(stack)
        .into_iter()
        .filter(|f| all || !is_machinery(f))
        .map(|f| ShownFrame {
            function: f.function.map(str::to_string),
            file: f.file.map(str::to_string),
            line: f.line,
            module: f.frame.module.clone(),
            inlined: f.inlined,
            text: f.describe(),
        })
        .collect()
}

/// ` <- f (file:line) <- g (file:line)`: the innermost frames, for one line of text.
pub fn inline(frames: &[ShownFrame]) -> String {
    let n = if crate::frame_options::full_stack() {
        frames.len()
    } else {
        INLINE_FRAMES
    };
    let mut out: String = frames
        .iter()
        .take(n)
        .map(|f| format!(" <- {}", f.text))
        .collect();
    if frames.len() > n {
        out.push_str(&format!(" <- ... ({} more)", frames.len() - n));
    }
    out
}

/// Where a group was allocated, in a few words: its innermost frame that is not an
/// operator (for PyTorch, the user's own line), as `function (file:line)` with the file's
/// name alone; `who` where every frame is an operator's.
pub fn site(api: &str, frames: &[ShownFrame]) -> String {
    match frames.iter().find(|f| f.module != "operator") {
        Some(f) => {
            let function = f.function.as_deref().unwrap_or(&f.module);
            let file = f.file.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p));
            match (file, f.line) {
                (Some(file), Some(line)) => format!("{function} ({file}:{line})"),
                (Some(file), None) => format!("{function} ({file})"),
                _ => function.to_string(),
            }
        }
        None => who(api, frames),
    }
}

/// Who allocated, for one line of text: `api <- f (file:line) <- ...`. A tensor (a block
/// an allocator reported, or a PyTorch snapshot's) is named by its stack alone: the
/// annotation's name says nothing to the person reading.
pub fn who(api: &str, frames: &[ShownFrame]) -> String {
    if api != vramtrace_schema::Api::VramtraceBlockAlloc.name() {
        return format!("{api}{}", inline(frames));
    }
    match inline(frames).strip_prefix(" <- ") {
        Some(stack) => stack.to_string(),
        None => "(tensor without a stack: allocated before the recorded history, or its stack was not recorded)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_schema::{Frame, Node};

    fn frame(ip: u64, module: &str, function: &str) -> Frame {
        Frame {
            ip,
            module: module.into(),
            offset: ip,
            function: Some(function.into()),
            file: Some(format!("/src/{function}.c")),
            line: Some(ip as u32),
            inlined: Vec::new(),
        }
    }

    #[test]
    fn machinery_is_left_out_and_order_kept() {
        let mut t = StackTable::default();
        // main <- train <- forward <- cudaMalloc's caller inside libcudart
        let chain = [
            frame(1, "/lib/x86_64-linux-gnu/libc.so.6", "__libc_start_main"),
            frame(2, "/app/train", "main"),
            frame(3, "/app/train", "train"),
            frame(4, "/app/libmodel.so", "forward"),
            frame(5, "/usr/lib/libcudart.so.12", "cudaMalloc"),
        ];
        for (i, f) in chain.iter().enumerate() {
            t.add_frame(f.clone());
            t.add_node(Node {
                id: i as u64 + 1,
                parent: i as u64,
                ip: f.ip,
            });
        }
        let names: Vec<_> = shown(&t, 5)
            .into_iter()
            .map(|f| f.function.unwrap())
            .collect();
        assert_eq!(names, ["forward", "train", "main"]);
        let texts: Vec<_> = shown(&t, 5).into_iter().map(|f| f.text).collect();
        assert_eq!(
            texts,
            [
                "forward (forward.c:4)",
                "train (train.c:3)",
                "main (main.c:2)"
            ]
        );
    }
}
