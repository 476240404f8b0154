"""A 16 MiB pool from the simulated runtime whose blocks a test script annotates as a
caching allocator annotates its tensors (tests/tests/categories.rs, pytest_plugin.rs).
Importing it reserves the pool."""
import ctypes

cuda = ctypes.CDLL("libcudart.so.12")
lib = ctypes.CDLL(None)
MiB = 1 << 20
pool = ctypes.c_void_p()
assert cuda.cudaMalloc(ctypes.byref(pool), ctypes.c_size_t(16 * MiB)) == 0


def tensor(offset, n):
    """A tensor of `n` bytes at `offset` in the pool (requested as its size)."""
    lib.vramtrace_block_alloc(ctypes.c_uint64(pool.value + offset), ctypes.c_uint64(n),
                              ctypes.c_uint64(n), ctypes.c_int(0), None)


def free(offset):
    """The tensor at `offset` goes back to the pool (which stays reserved)."""
    lib.vramtrace_block_free(ctypes.c_uint64(pool.value + offset), ctypes.c_int(0), None)
