//! Names of the CUDA result codes that matter for memory.

use vramtrace_schema::Api;

/// The symbolic name of `code` as returned by `api` (driver and runtime name them apart).
pub fn name(api: Api, code: i32) -> String {
    let known = if api.is_runtime() {
        match code {
            0 => Some("cudaSuccess"),
            1 => Some("cudaErrorInvalidValue"),
            2 => Some("cudaErrorMemoryAllocation"),
            3 => Some("cudaErrorInitializationError"),
            _ => None,
        }
    } else {
        match code {
            0 => Some("CUDA_SUCCESS"),
            1 => Some("CUDA_ERROR_INVALID_VALUE"),
            2 => Some("CUDA_ERROR_OUT_OF_MEMORY"),
            3 => Some("CUDA_ERROR_NOT_INITIALIZED"),
            201 => Some("CUDA_ERROR_INVALID_CONTEXT"),
            500 => Some("CUDA_ERROR_NOT_FOUND"),
            801 => Some("CUDA_ERROR_NOT_SUPPORTED"),
            _ => None,
        }
    };
    match known {
        Some(n) => format!("{n} ({code})"),
        None => format!("error {code}"),
    }
}
