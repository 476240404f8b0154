//! Libraries that allocate device memory from the driver themselves, below any caching
//! allocator: NCCL's communication buffers, cuBLAS's and cuDNN's workspaces. An
//! allocation is a library's where a frame of its stack is in that library's file.

use vramtrace_schema::StackTable;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    Nccl,
    Cublas,
    Cudnn,
}

/// File names (their start, before the version) of each library's shared objects.
const FILES: &[(&str, Library)] = &[
    ("libnccl.so", Library::Nccl),
    ("libcublasLt.so", Library::Cublas),
    ("libcublas.so", Library::Cublas),
    ("libcudnn", Library::Cudnn),
];

impl Library {
    pub const ALL: [Library; 3] = [Library::Nccl, Library::Cublas, Library::Cudnn];

    /// The name the JSON gives it.
    pub fn name(self) -> &'static str {
        match self {
            Library::Nccl => "nccl",
            Library::Cublas => "cublas",
            Library::Cudnn => "cudnn",
        }
    }

    pub fn words(self) -> &'static str {
        match self {
            Library::Nccl => "NCCL",
            Library::Cublas => "cuBLAS",
            Library::Cudnn => "cuDNN",
        }
    }
}

/// The library whose frame is innermost in `stack`, if any: the one that asked the driver.
pub fn of_stack(stacks: &StackTable, stack: u64) -> Option<Library> {
    stacks.frames(stack).into_iter().find_map(|f| {
        let file = f.module.rsplit('/').next().unwrap_or(&f.module);
        FILES
            .iter()
            .find(|(prefix, _)| file.starts_with(prefix))
            .map(|&(_, l)| l)
    })
}
