//! XLA's preallocation (JAX): by default XLA's GPU client takes 75% of the card in one
//! allocation at start and runs its own BFC allocator inside it, so the trace shows one
//! huge block and none of the program's arrays. Found as one allocation of at least half
//! the card's memory, made from XLA's code (a frame in jaxlib / xla_extension / libxla),
//! or, where no frame says so, among a process's first allocations on that device in a
//! process whose other allocations show XLA's code. `summary` and `oom` say what it
//! means and how to see more.

use crate::replay::{Run, Step};
use crate::units;
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_schema::{Op, StackTable};

/// Allocations of a process on a device that still count as made "at start".
const EARLY_ALLOCATIONS: u32 = 4;
/// Allocation stacks kept per process to tell whether it runs XLA at all.
const STACKS_KEPT: usize = 16;

/// One preallocation found.
#[derive(Clone, Debug, Serialize)]
pub struct Preallocation {
    pub pid: u32,
    pub device: i32,
    pub bytes: u64,
    /// The card's memory, as the driver reported it to the process.
    pub total_bytes: u64,
    pub time_ns: u64,
    /// `xla-frames`: its stack is in XLA's code; `size`: a huge early allocation in a
    /// process that runs XLA elsewhere.
    pub evidence: &'static str,
}

struct Candidate {
    device: i32,
    bytes: u64,
    total: u64,
    time: u64,
    stack: u64,
    early: bool,
}

#[derive(Default)]
struct ProcessState {
    total: Option<u64>,
    allocations: BTreeMap<i32, u32>,
    stacks: Vec<u64>,
    candidates: Vec<Candidate>,
}

/// Fed with every step of a replay; [`PreallocationWatch::finish`] gives what it found.
#[derive(Default)]
pub struct PreallocationWatch {
    processes: Vec<ProcessState>,
}

impl PreallocationWatch {
    pub fn step(&mut self, step: &Step) {
        if self.processes.len() <= step.process {
            self.processes
                .resize_with(step.process + 1, ProcessState::default);
        }
        let p = &mut self.processes[step.process];
        let e = step.event;
        match e.api.op() {
            Op::Meminfo | Op::DeviceSample if e.ok() => p.total = e.total.or(p.total),
            Op::Alloc | Op::Create if e.ok() && e.kind().is_device_memory() => {
                let n = p.allocations.entry(e.dev).or_default();
                *n += 1;
                if p.stacks.len() < STACKS_KEPT {
                    p.stacks.push(e.stack);
                }
                if let Some(total) = p.total.filter(|&t| t > 0 && e.size.saturating_mul(2) >= t) {
                    p.candidates.push(Candidate {
                        device: e.dev,
                        bytes: e.size,
                        total,
                        time: step.time,
                        stack: e.stack,
                        early: *n <= EARLY_ALLOCATIONS,
                    });
                }
            }
            _ => {}
        }
    }

    /// The preallocations found, at most one per process and device. Stacks are judged
    /// here, once the whole trace (and every frame record) has been read.
    pub fn finish(self, run: &Run) -> Vec<Preallocation> {
        let mut found = Vec::new();
        for (i, p) in self.processes.into_iter().enumerate() {
            let Some(model) = run.processes.get(i) else {
                continue;
            };
            let runs_xla = p.stacks.iter().any(|&s| in_xla(&model.stacks, s));
            let mut seen = Vec::new();
            for c in p.candidates {
                let evidence = if in_xla(&model.stacks, c.stack) {
                    "xla-frames"
                } else if c.early && runs_xla {
                    "size"
                } else {
                    continue;
                };
                if seen.contains(&c.device) {
                    continue;
                }
                seen.push(c.device);
                found.push(Preallocation {
                    pid: model.header.pid,
                    device: c.device,
                    bytes: c.bytes,
                    total_bytes: c.total,
                    time_ns: c.time,
                    evidence,
                });
            }
        }
        found
    }
}

/// Whether a frame of `stack` is in XLA's code (jaxlib's xla_extension.so, libxla*, the
/// CUDA plugin of jax_plugins).
fn in_xla(stacks: &StackTable, stack: u64) -> bool {
    stacks.frames(stack).iter().any(|f| {
        let module = f.module.rsplit('/').next().unwrap_or(&f.module);
        module.contains("xla_extension")
            || module.starts_with("libxla")
            || module.contains("xla_cuda")
            || f.module.contains("/jaxlib/")
            || f.module.contains("/jax_plugins/")
    })
}

impl Preallocation {
    fn share(&self) -> String {
        format!(
            "{} ({}% of the card's {})",
            units::bytes(self.bytes),
            self.bytes * 100 / self.total_bytes.max(1),
            units::bytes(self.total_bytes)
        )
    }

    /// What it is, for `summary`.
    pub fn note(&self) -> String {
        let who = match self.evidence {
            "xla-frames" => "XLA (JAX) took",
            _ => "one allocation early in a process that runs XLA (JAX) took",
        };
        format!(
            "{who} {} in one block at {}: JAX preallocates most of the card at start and \
             hands out its arrays from its own pool inside it, so this block is the pool, not \
             what the arrays use. To see them: XLA_PYTHON_CLIENT_PREALLOCATE=false (the pool \
             grows as needed) or XLA_PYTHON_CLIENT_ALLOCATOR=platform (each array from the \
             driver, slower).",
            self.share(),
            units::seconds(self.time_ns)
        )
    }

    /// What it means for an allocation that failed on the same device, for `oom`.
    pub fn advice(&self) -> String {
        format!(
            "XLA (JAX) preallocated {} at {} as its own pool: every other allocation on this \
             card shares the rest, and JAX's own out-of-memory errors happen inside the pool, \
             without a CUDA call. Run with XLA_PYTHON_CLIENT_PREALLOCATE=false (or a smaller \
             XLA_PYTHON_CLIENT_MEM_FRACTION) to leave memory to others, or \
             XLA_PYTHON_CLIENT_ALLOCATOR=platform to see each of JAX's arrays in the trace.",
            self.share(),
            units::seconds(self.time_ns)
        )
    }
}

/// The preallocation of process `pid` on `device`, if one was found.
pub fn of(found: &[Preallocation], pid: u32, device: i32) -> Option<&Preallocation> {
    found.iter().find(|p| p.pid == pid && p.device == device)
}
