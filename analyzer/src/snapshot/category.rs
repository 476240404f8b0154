//! A snapshot's tensor categories, inferred from the frames that allocated each tensor:
//! the whole stack PyTorch recorded, torch's own Python and C++ frames among it (the
//! views show only the user's). A tensor the backward pass allocated is a gradient, whatever
//! else its stack holds (a compiled backward names its forward's source lines; a forward
//! recomputed by activation checkpointing runs in backward); else the innermost frame that
//! meets a rule decides (so a forward inside an optimizer's closure is activations):
//!
//! - optimizer state: a frame in `torch/optim/` other than `lr_scheduler.py` and
//!   `swa_utils.py` (every `Optimizer.step` runs inside its wrapper there, a custom
//!   optimizer's too);
//! - gradients: the autograd engine's C++ frames (`torch::autograd::Engine`, a
//!   `torch::autograd::generated::` backward function), `backward` in `torch/autograd/`,
//!   `torch/_tensor.py` or `torch/_functorch/`, or `grad` in `torch/autograd/__init__.py`;
//! - parameters: `torch/nn/parameter.py`, a module's `__init__` in `torch/nn/`, any
//!   `reset_parameters`, `_apply`, `to`, `cuda`, `load_state_dict` or
//!   `_load_from_state_dict` in `torch/nn/modules/module.py`, `torch/serialization.py`
//!   (`torch.load`), or FSDP (`torch/distributed/fsdp/`, `torch/distributed/_composable/`);
//! - activations: `_call_impl` or `_wrapped_call_impl` in `torch/nn/modules/module.py`
//!   (a module called), or a function named `forward`;
//! - other tensors: no frame meets a rule (the program's own code: its inputs, weights it
//!   builds in its own `__init__`, temporaries);
//! - not known: no frames.
//!
//! An inference, said as one wherever shown: a temporary of the backward pass counts as
//! a gradient, one of `step` as optimizer state.

use super::frames::head;
use super::model::Frame;
use super::pickle::{Pickle, Value};
use crate::model::{Category, TensorCategories};

/// The category of a tensor allocated by `frames` (innermost first).
pub fn infer(frames: &[Frame]) -> Category {
    if frames.is_empty() {
        return Category::Unknown;
    }
    if frames
        .iter()
        .any(|f| backward(head(&f.filename), head(&f.name)))
    {
        return Category::Gradients;
    }
    frames
        .iter()
        .find_map(|f| of_frame(head(&f.filename), head(&f.name)))
        .unwrap_or(Category::Other)
}

/// The category one frame says, if it says one.
fn of_frame(file: &str, name: &str) -> Option<Category> {
    if optimizer(file) {
        Some(Category::OptimizerState)
    } else if parameters(file, name) {
        Some(Category::Parameters)
    } else if forward(file, name) {
        Some(Category::Activations)
    } else {
        None
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

fn storage(p: &Pickle, s: Value) -> Option<((i32, u64), (Category, u64))> {
    let fields = p.seq(s)?;
    let [device, address, bytes, category] = fields else {
        return None;
    };
    let device = i32::try_from(p.int(*device)?).ok()?;
    let address = u64::try_from(p.int(*address)?).ok()?;
    let bytes = u64::try_from(p.int(*bytes)?).ok()?;
    let category = Category::recorded(p.str(*category)?)?;
    Some(((device, address), (category, bytes)))
}

fn optimizer(file: &str) -> bool {
    file.contains("/torch/optim/")
        && !file.ends_with("/lr_scheduler.py")
        && !file.ends_with("/swa_utils.py")
}

fn backward(file: &str, name: &str) -> bool {
    name.contains("torch::autograd::Engine")
        || name.contains("torch::autograd::generated::")
        || (name == "backward"
            && (file.contains("/torch/autograd/")
                || file.ends_with("/torch/_tensor.py")
                || file.contains("/torch/_functorch/")))
        || (name == "grad" && file.ends_with("/torch/autograd/__init__.py"))
}

fn parameters(file: &str, name: &str) -> bool {
    file.ends_with("/torch/nn/parameter.py")
        || file.ends_with("/torch/serialization.py")
        || file.contains("/torch/distributed/fsdp/")
        || file.contains("/torch/distributed/_composable/")
        || (name == "__init__" && file.contains("/torch/nn/"))
        || name == "reset_parameters"
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
    fn the_backward_pass_then_the_innermost_frame_that_meets_a_rule_decides() {
        let torch = "/usr/lib/python3/site-packages/torch";
        let module = format!("{torch}/nn/modules/module.py");
        let step = f(&format!("{torch}/optim/optimizer.py"), "wrapper");
        let scheduler = f(&format!("{torch}/optim/lr_scheduler.py"), "step");
        let engine = f("", "torch::autograd::Engine::thread_main(...)");
        let to = f(&module, "_apply");
        let forward = f(&module, "_call_impl");
        let user = f("/home/me/train.py", "main");
        assert_eq!(infer(&[]), Category::Unknown);
        assert_eq!(infer(std::slice::from_ref(&user)), Category::Other);
        assert_eq!(infer(&[scheduler, user.clone()]), Category::Other);
        let called = [forward.clone(), user.clone()];
        assert_eq!(infer(&called), Category::Activations);
        assert_eq!(infer(&[to.clone(), user.clone()]), Category::Parameters);
        // A forward inside an optimizer's closure (LBFGS) is activations; one run by the
        // backward pass (compiled, or recomputed) is gradients.
        let closure = [forward.clone(), step.clone(), user.clone()];
        assert_eq!(infer(&closure), Category::Activations);
        assert_eq!(infer(&[forward, engine.clone()]), Category::Gradients);
        assert_eq!(infer(&[step.clone(), engine]), Category::Gradients);
        assert_eq!(infer(&[step, to]), Category::OptimizerState);
    }

    #[test]
    fn a_name_of_megabytes_is_read_at_its_head() {
        let long = format!("{}/torch/optim/adam.py", "x".repeat(1 << 20));
        assert_eq!(infer(&[f(&long, "step")]), Category::Other);
        let name = format!("forward{}", "é".repeat(3000));
        assert_eq!(head(&name).len(), 4095, "cut at a character's boundary");
    }
}
