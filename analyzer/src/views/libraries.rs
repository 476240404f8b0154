//! Libraries that allocate device memory from the driver themselves, below any caching
//! allocator: NCCL's communication buffers, cuBLAS's and cuDNN's workspaces, and any other
//! shared library's own allocations (an XLA client's pool, a plugin's buffers). An
//! allocation is a library's where the innermost frame of its stack that is not CUDA's or
//! libc's own is in that library's file.

use vramtrace_schema::StackTable;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    Nccl,
    Cublas,
    Cudnn,
    /// A shared library not named above, nor PyTorch's own (its caching allocator's
    /// segments hold the program's tensors).
    Other,
}

/// File names (their start, before the version) of each library's shared objects.
const FILES: &[(&str, Library)] = &[
    ("libnccl.so", Library::Nccl),
    ("libcublasLt.so", Library::Cublas),
    ("libcublas.so", Library::Cublas),
    ("libcudnn", Library::Cudnn),
];

/// PyTorch's own libraries: what they allocate is its caching allocator's segments.
const ALLOCATOR_FILES: &[&str] = &["libc10_cuda.so", "libc10.so", "libtorch"];

impl Library {
    pub const ALL: [Library; 4] = [
        Library::Nccl,
        Library::Cublas,
        Library::Cudnn,
        Library::Other,
    ];

    /// The name the JSON gives it.
    pub fn name(self) -> &'static str {
        match self {
            Library::Nccl => "nccl",
            Library::Cublas => "cublas",
            Library::Cudnn => "cudnn",
            Library::Other => "other_libraries",
        }
    }

    pub fn words(self) -> &'static str {
        match self {
            Library::Nccl => "NCCL",
            Library::Cublas => "cuBLAS",
            Library::Cudnn => "cuDNN",
            Library::Other => "other libraries",
        }
    }
}

/// The library that asked the driver for the memory of `stack`, if a library did: the one
/// of its innermost frame that is not machinery (CUDA's own libraries, libc,
/// vramtrace's). The program's executable, its Python code and PyTorch's libraries are
/// not libraries here.
pub fn of_stack(stacks: &StackTable, stack: u64, exe: &str) -> Option<Library> {
    let frame = stacks
        .frames(stack)
        .into_iter()
        .find(|f| !super::stacks::is_machinery_module(&f.module))?;
    let file = frame.module.rsplit('/').next().unwrap_or(&frame.module);
    if let Some(&(_, l)) = FILES.iter().find(|(prefix, _)| file.starts_with(prefix)) {
        return Some(l);
    }
    let shared = file.contains(".so") && frame.module != exe;
    let pytorch = ALLOCATOR_FILES.iter().any(|p| file.starts_with(p));
    (shared && !pytorch).then_some(Library::Other)
}
