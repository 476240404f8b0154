//! The frames of a PyTorch stack a person can read: their own Python code, and the
//! operator it called.
//!
//! A snapshot's stacks (`_record_memory_history(stacks="all")`) interleave C++ and Python,
//! innermost first: the unwinder (`torch::unwind::unwind`, `CapturedTraceback::gather`),
//! the caching allocator, tensor creation, the dispatcher's boxing and redispatch, the
//! operator (`at::_ops::mm::call`), the Python binding, then Python frames separated by
//! the CPython eval loop, torch's own Python (`torch/nn/modules/module.py`), the user's
//! files, and the interpreter's start-up. memory_viz hides a fixed list of C++ names and
//! still shows torch's Python; here only the user's frames are kept (Python frames outside
//! torch, site-packages and the standard library), innermost first, after the operator.

use super::model::Frame;

/// One frame as shown: what a group of tensors is named by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readable<'a> {
    /// `aten::mm` for the operator, the function name otherwise.
    pub name: std::borrow::Cow<'a, str>,
    /// The source file; `None` for the operator.
    pub filename: Option<&'a str>,
    pub line: i64,
    pub python: bool,
}

/// Python source, by its file name (`<string>` and notebook cells count).
fn is_python(f: &Frame) -> bool {
    f.filename.ends_with(".py")
        || (f.filename.starts_with('<') && !f.filename.starts_with("<frozen"))
}

/// Python that is not the user's: torch, installed packages, the standard library.
fn is_library(filename: &str) -> bool {
    filename.starts_with("<frozen") || LIBRARY.iter().any(|l| filename.contains(l))
}

/// The parts of a path that say a Python file is not the user's (`pack --redact` keeps
/// a path from the first of them on, so that the views still tell library from user).
pub(crate) const LIBRARY: &[&str] = &[
    "/site-packages/",
    "/dist-packages/",
    "/torch/",
    "/lib/python3",
    "/lib64/python3",
];

/// `at::_ops::pow_Tensor_Scalar::call(...)` -> `aten::pow_Tensor_Scalar`.
fn operator(f: &Frame) -> Option<String> {
    let rest = f.name.strip_prefix("at::_ops::")?;
    let op = rest.split("::").next().filter(|s| !s.is_empty())?;
    Some(format!("aten::{op}"))
}

/// The frames to name a stack by, innermost first: the operator, then the user's Python
/// frames (where there are none, every Python frame). `all` keeps every frame as it is.
pub fn readable(frames: &[Frame], all: bool) -> Vec<Readable<'_>> {
    fn plain(f: &Frame) -> Readable<'_> {
        Readable {
            name: std::borrow::Cow::Borrowed(&*f.name),
            filename: Some(&*f.filename),
            line: f.line,
            python: is_python(f),
        }
    }
    if all {
        return frames.iter().map(plain).collect();
    }
    let mut out: Vec<Readable> = frames
        .iter()
        .find_map(operator)
        .map(|op| Readable {
            name: std::borrow::Cow::Owned(op),
            filename: None,
            line: 0,
            python: false,
        })
        .into_iter()
        .collect();
    let user = frames
        .iter()
        .filter(|f| is_python(f) && !is_library(&f.filename));
    let python: Vec<Readable> = if user.clone().next().is_some() {
        user.map(plain).collect()
    } else {
        frames.iter().filter(|f| is_python(f)).map(plain).collect()
    };
    out.extend(python);
    out
}

/// The most of a frame's file or function name that is read or kept: a crafted name of
/// megabytes is neither scanned whole by each rule nor copied into every frame it names
/// (no real path or function name is this long).
pub fn head(s: &str) -> &str {
    let mut end = s.len().min(4096);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// C++ frames of the stack's own capture and of the allocator: not who asked.
const CAPTURE: &[&str] = &[
    "torch::unwind::",
    "torch::CapturedTraceback",
    "c10::cuda::CUDACachingAllocator",
    "c10::",
];

/// Frames shown from a stack where [`readable`] keeps none (no operator, no Python frame,
/// as on the autograd engine's thread): its innermost few outside the capture and the
/// allocator.
pub fn fallback(frames: &[Frame]) -> Vec<Readable<'_>> {
    frames
        .iter()
        .filter(|f| !CAPTURE.iter().any(|c| f.name.starts_with(c)))
        .take(4)
        .map(|f| Readable {
            name: std::borrow::Cow::Borrowed(&*f.name),
            filename: Some(&*f.filename),
            line: f.line,
            python: is_python(f),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str, filename: &str, line: i64) -> Frame {
        Frame {
            filename: filename.into(),
            line,
            name: name.into(),
        }
    }

    #[test]
    fn the_operator_then_the_users_python() {
        let frames = [
            f("torch::unwind::unwind()", "??", 0),
            f(
                "torch::CapturedTraceback::gather(bool, bool, bool)",
                "??",
                0,
            ),
            f(
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)",
                "CUDACachingAllocator.cpp",
                0,
            ),
            f("at::_ops::mm::redispatch(c10::DispatchKeySet)", "??", 0),
            f("at::_ops::mm::call(at::Tensor const&)", "??", 0),
            f("_PyEval_EvalFrameDefault", "??", 0),
            f(
                "forward",
                "/env/lib/python3.11/site-packages/torch/nn/modules/linear.py",
                125,
            ),
            f(
                "_call_impl",
                "/env/lib/python3.11/site-packages/torch/nn/modules/module.py",
                1750,
            ),
            f("forward", "/home/me/model.py", 40),
            f("<module>", "/home/me/train.py", 88),
            f("Py_BytesMain", "??", 0),
        ];
        let shown: Vec<String> = readable(&frames, false)
            .iter()
            .map(|r| format!("{}@{}:{}", r.name, r.filename.unwrap_or("-"), r.line))
            .collect();
        assert_eq!(
            shown,
            [
                "aten::mm@-:0",
                "forward@/home/me/model.py:40",
                "<module>@/home/me/train.py:88"
            ]
        );
        assert_eq!(readable(&frames, true).len(), frames.len());
    }

    #[test]
    fn torch_python_is_kept_when_there_is_nothing_else() {
        let frames = [
            f(
                "wrapped",
                "/env/lib/python3.9/site-packages/torch/_tensor.py",
                40,
            ),
            f("??", "??", 0),
        ];
        let r = readable(&frames, false);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].name, "wrapped");
    }
}
