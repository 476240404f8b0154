//! A snapshot's tensor categories, inferred from the frames that allocated each tensor:
//! the whole stack PyTorch recorded, torch's own Python and C++ frames among it (the
//! views show only the user's). The first rule that any frame meets decides:
//!
//! 1. optimizer state: a frame in `torch/optim/` (every `Optimizer.step` runs inside its
//!    wrapper there, a custom optimizer's too);
//! 2. gradients: the autograd engine's C++ frames (`torch::autograd::Engine`, a
//!    `torch::autograd::generated::` backward function), or `backward` in
//!    `torch/autograd/` or `torch/_tensor.py`;
//! 3. parameters: `torch/nn/parameter.py`, a module's `__init__` in `torch/nn/modules/`,
//!    or `_apply`, `to`, `cuda`, `load_state_dict`, `_load_from_state_dict` in
//!    `torch/nn/modules/module.py`;
//! 4. activations: `_call_impl` or `_wrapped_call_impl` in `torch/nn/modules/module.py`
//!    (a module called), or a function named `forward`;
//! 5. other tensors: any other tensor with frames (the program's own code: its inputs,
//!    weights it builds without `torch.nn`, temporaries);
//! 6. not known: no frames.
//!
//! An inference, said as one wherever shown: a temporary of the backward pass counts as
//! a gradient, one of `step` as optimizer state, and a forward recomputed in backward
//! (activation checkpointing) as gradients.

use super::model::Frame;
use super::pickle::{Pickle, Value};
use crate::model::{Category, TensorCategories};

/// The category of a tensor allocated by `frames` (innermost first).
pub fn infer(frames: &[Frame]) -> Category {
    if frames.is_empty() {
        return Category::Unknown;
    }
    let any = |rule: fn(&str, &str) -> bool| frames.iter().any(|f| rule(&f.filename, &f.name));
    if any(optimizer) {
        Category::OptimizerState
    } else if any(backward) {
        Category::Gradients
    } else if any(parameters) {
        Category::Parameters
    } else if any(forward) {
        Category::Activations
    } else {
        Category::Other
    }
}

/// The storages the PyTorch hook recorded in the snapshot (`vramtrace_tensors`:
/// `{"version": 1, "complete": bool, "storages": [[device, address, bytes, category],
/// ...]}`) into `into`; a note for what could not be read.
pub fn recorded(p: &Pickle, into: &mut TensorCategories) -> Option<String> {
    let v = p.get(p.root, "vramtrace_tensors")?;
    let storages = p.get(v, "storages").and_then(|s| p.seq(s));
    let Some(storages) = storages else {
        return Some("\"vramtrace_tensors\" has no list \"storages\": ignored".into());
    };
    into.recorded_partly |= p.get(v, "complete") != Some(Value::Bool(true));
    let mut unread = 0usize;
    for &s in storages {
        match storage(p, s) {
            Some((key, category)) => {
                into.recorded.entry(key).or_insert(category);
            }
            None => unread += 1,
        }
    }
    (unread > 0).then(|| {
        format!("{unread} of the \"vramtrace_tensors\" storages are not [device, address, bytes, category]: left out")
    })
}

fn storage(p: &Pickle, s: Value) -> Option<((i32, u64), Category)> {
    let fields = p.seq(s)?;
    let [device, address, _, category] = fields else {
        return None;
    };
    let device = i32::try_from(p.int(*device)?).ok()?;
    let address = u64::try_from(p.int(*address)?).ok()?;
    let category = Category::recorded(p.str(*category)?)?;
    Some(((device, address), category))
}

fn optimizer(file: &str, _: &str) -> bool {
    file.contains("/torch/optim/")
}

fn backward(file: &str, name: &str) -> bool {
    name.contains("torch::autograd::Engine")
        || name.contains("torch::autograd::generated::")
        || (name == "backward"
            && (file.contains("/torch/autograd/") || file.ends_with("/torch/_tensor.py")))
}

fn parameters(file: &str, name: &str) -> bool {
    file.ends_with("/torch/nn/parameter.py")
        || (name == "__init__" && file.contains("/torch/nn/modules/"))
        || (file.ends_with("/torch/nn/modules/module.py")
            && matches!(
                name,
                "_apply" | "to" | "cuda" | "load_state_dict" | "_load_from_state_dict"
            ))
}

fn forward(file: &str, name: &str) -> bool {
    name == "forward"
        || (file.ends_with("/torch/nn/modules/module.py")
            && matches!(name, "_call_impl" | "_wrapped_call_impl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(filename: &str, name: &str) -> Frame {
        Frame {
            filename: filename.into(),
            line: 1,
            name: name.into(),
        }
    }

    #[test]
    fn the_first_rule_a_frame_meets_decides() {
        let module = "/usr/lib/python3/site-packages/torch/nn/modules/module.py";
        let step = f(
            "/usr/lib/python3/site-packages/torch/optim/optimizer.py",
            "wrapper",
        );
        let engine = f("", "torch::autograd::Engine::thread_main(...)");
        let to = f(module, "_apply");
        let forward = f(module, "_call_impl");
        let user = f("/home/me/train.py", "main");
        assert_eq!(infer(&[]), Category::Unknown);
        assert_eq!(infer(std::slice::from_ref(&user)), Category::Other);
        assert_eq!(
            infer(&[forward.clone(), user.clone()]),
            Category::Activations
        );
        assert_eq!(infer(&[to.clone(), user.clone()]), Category::Parameters);
        assert_eq!(infer(&[forward, engine.clone(), to]), Category::Gradients);
        assert_eq!(infer(&[engine, step, user]), Category::OptimizerState);
    }
}
