//! Python frames: for threads that hold the GIL, read through CPython's C API found at run
//! time (`dlsym`, no link to libpython; the functions used exist from 3.9 to 3.14); for
//! threads that released it, read from the thread's own frames ([`super::python_nogil`]).
//! Nothing happens in a process without Python.
//!
//! A Python frame is stored as a synthetic return address: [`PYTHON_BIT`], the index of
//! its code object in a table filled once per code object (file and function read with
//! the GIL held), and the line. The writer turns it into a frame record.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::sync::{Mutex, MutexGuard};

use super::python_nogil::Reader;

/// Marks a synthetic address as a Python frame (no user-space code lives up there).
pub const PYTHON_BIT: u64 = 1 << 63;
const LINE_BITS: u32 = 24;
/// The outermost frame of a stack taken in a Python process on a thread without the GIL
/// whose Python frames could not be read (a thread that never ran Python, such as a
/// library's worker, or an interpreter whose layout is not known): it says why no Python
/// frames follow.
pub const NO_GIL: u64 = PYTHON_BIT | ((u32::MAX as u64) << LINE_BITS);

type Obj = *mut c_void;

struct CApi {
    gil_check: unsafe extern "C" fn() -> c_int,
    get_frame: unsafe extern "C" fn() -> Obj,
    frame_code: unsafe extern "C" fn(Obj) -> Obj,
    frame_line: unsafe extern "C" fn(Obj) -> c_int,
    frame_back: unsafe extern "C" fn(Obj) -> Obj,
    incref: unsafe extern "C" fn(Obj),
    decref: unsafe extern "C" fn(Obj),
    getattr: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    as_utf8: unsafe extern "C" fn(Obj) -> *const c_char,
    err_fetch: unsafe extern "C" fn(*mut Obj, *mut Obj, *mut Obj),
    err_restore: unsafe extern "C" fn(Obj, Obj, Obj),
    /// The interpreter's module: native frames inside it are where Python frames go.
    module: Range<u64>,
    /// Frames of threads without the GIL; `None` for an interpreter whose layout is not
    /// known.
    nogil: Option<Reader>,
}

static API: OnceLock<CApi> = OnceLock::new();
/// The module tables built when Python was last looked for and not found: it is looked
/// for again once a table is rebuilt (a program can load libpython after its first call).
static ABSENT_AT: AtomicU64 = AtomicU64::new(0);
/// Code object address -> index into CODE_NAMES. Code objects in it are kept alive (one
/// reference each), so an address is never reused for another code object.
static CODES: Mutex<Option<HashMap<usize, u32>>> = Mutex::new(None);
/// (file, function) -> index into CODE_NAMES, for frames read without the GIL: their code
/// objects are not kept alive, so their names are kept by content.
static NAMED: Mutex<Option<HashMap<(String, String), u32>>> = Mutex::new(None);
/// (file, function) per code object index, read by the writer thread.
static CODE_NAMES: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// The code tables' locks, held across a fork by the forking thread (in the order
/// [`code_index`] takes them): a thread without the GIL can fork while another names a
/// code object, and the child would inherit the locks taken.
#[allow(dead_code)]
pub struct ForkHold(
    MutexGuard<'static, Option<HashMap<usize, u32>>>,
    MutexGuard<'static, Option<HashMap<(String, String), u32>>>,
    MutexGuard<'static, Vec<(String, String)>>,
);

pub fn hold_for_fork() -> ForkHold {
    let codes = CODES.lock().unwrap_or_else(|e| e.into_inner());
    let named = NAMED.lock().unwrap_or_else(|e| e.into_inner());
    ForkHold(
        codes,
        named,
        CODE_NAMES.lock().unwrap_or_else(|e| e.into_inner()),
    )
}

fn find(name: &CStr) -> Option<usize> {
    // SAFETY: a lookup in the default scope.
    let p = unsafe { crate::dlsym::real_dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
    (p != 0).then_some(p)
}

// The struct field each transmute fills is its type annotation.
#[allow(clippy::missing_transmute_annotations)]
fn load() -> Option<CApi> {
    if !crate::settings::get().python {
        return None;
    }
    let gil = find(c"PyGILState_Check")?;
    let range = super::modules::loaded()
        .into_iter()
        .find(|m| m.range.contains(&(gil as u64)))?
        .range;
    macro_rules! f {
        ($name:literal) => {
            // SAFETY: CPython's exported function of exactly this C signature.
            unsafe { std::mem::transmute::<usize, _>(find($name)?) }
        };
    }
    Some(CApi {
        gil_check: f!(c"PyGILState_Check"),
        get_frame: f!(c"PyEval_GetFrame"),
        frame_code: f!(c"PyFrame_GetCode"),
        frame_line: f!(c"PyFrame_GetLineNumber"),
        frame_back: f!(c"PyFrame_GetBack"),
        incref: f!(c"Py_IncRef"),
        decref: f!(c"Py_DecRef"),
        getattr: f!(c"PyObject_GetAttrString"),
        as_utf8: f!(c"PyUnicode_AsUTF8"),
        err_fetch: f!(c"PyErr_Fetch"),
        err_restore: f!(c"PyErr_Restore"),
        module: range,
        nogil: version().and_then(|v| Reader::new(&v, find)),
    })
}

/// `Py_GetVersion()`: "3.11.2 (main, ...)".
fn version() -> Option<String> {
    // SAFETY: CPython's exported function of this signature; it returns a static string.
    unsafe {
        let f = std::mem::transmute::<usize, unsafe extern "C" fn() -> *const c_char>(find(
            c"Py_GetVersion",
        )?);
        let s = f();
        (!s.is_null()).then(|| CStr::from_ptr(s).to_string_lossy().into_owned())
    }
}

fn api() -> Option<&'static CApi> {
    if let Some(api) = API.get() {
        return Some(api);
    }
    let builds = super::capture::table_builds();
    if ABSENT_AT.load(Ordering::Relaxed) == builds {
        return None;
    }
    // No lock is held while looking, and threads that race here each look: with a
    // once-initialiser, a thread in a library constructor (holding the loader's lock)
    // would wait for one that waits for the loader's lock in `dlsym`.
    match load() {
        Some(api) => {
            let _ = API.set(api);
            API.get()
        }
        None => {
            ABSENT_AT.store(builds, Ordering::Relaxed);
            None
        }
    }
}

/// Whether this process has a Python interpreter to take frames from.
pub fn present() -> bool {
    api().is_some()
}

/// Whether `ip` is a native frame of the interpreter itself.
pub fn in_interpreter(ip: u64) -> bool {
    api().is_some_and(|a| a.module.contains(&ip))
}

/// What the Python side of a stack is.
pub enum PyStack {
    /// No Python in this process.
    Absent,
    /// Python is here, but this thread does not hold the GIL.
    NoGil,
    /// This many Python frames were written, innermost first.
    Frames(usize),
}

/// Writes the calling thread's Python frames into `out`, innermost first, as many as fit.
/// `out` is left as it was when none can be read.
pub fn capture(out: &mut [u64]) -> PyStack {
    let Some(api) = api() else {
        return PyStack::Absent;
    };
    // SAFETY: CPython API calls, made only while this thread holds the GIL; every new
    // reference is released.
    unsafe {
        if (api.gil_check)() != 1 {
            return match &api.nogil {
                Some(reader) => without_gil(reader, out),
                None => PyStack::NoGil,
            };
        }
        let mut n = 0;
        let mut frame = (api.get_frame)();
        if frame.is_null() {
            return PyStack::Frames(0);
        }
        (api.incref)(frame);
        while !frame.is_null() && n < out.len() {
            let code = (api.frame_code)(frame);
            let line = (api.frame_line)(frame).max(0) as u64;
            if !code.is_null() {
                let index = code_index(api, code);
                (api.decref)(code);
                out[n] = address(index, line);
                n += 1;
            }
            let back = (api.frame_back)(frame);
            (api.decref)(frame);
            frame = back;
        }
        if !frame.is_null() {
            (api.decref)(frame);
        }
        PyStack::Frames(n)
    }
}

/// The frames of a thread without the GIL, read from its own frame chain.
fn without_gil(reader: &Reader, out: &mut [u64]) -> PyStack {
    let mut n = 0;
    let read = reader.frames(out.len(), &mut named_index, &mut |index, line| {
        out[n] = address(index, line as u64);
        n += 1;
        true
    });
    match read {
        Some(()) if n > 0 => PyStack::Frames(n),
        _ => PyStack::NoGil,
    }
}

/// The synthetic address of line `line` of the code object at table index `index`.
fn address(index: u32, line: u64) -> u64 {
    PYTHON_BIT | ((index as u64) << LINE_BITS) | line.min((1 << LINE_BITS) - 1)
}

/// The table index of the names (file, function), added the first time they are seen.
fn named_index(file: String, function: String) -> u32 {
    let mut named = NAMED.lock().unwrap_or_else(|e| e.into_inner());
    let named = named.get_or_insert_with(HashMap::new);
    let key = (file, function);
    if let Some(&i) = named.get(&key) {
        return i;
    }
    let mut table = CODE_NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let i = table.len() as u32;
    table.push(key.clone());
    named.insert(key, i);
    i
}

/// The table index of `code`, reading its names the first time.
unsafe fn code_index(api: &CApi, code: Obj) -> u32 {
    let mut codes = CODES.lock().unwrap_or_else(|e| e.into_inner());
    let codes = codes.get_or_insert_with(HashMap::new);
    if let Some(&i) = codes.get(&(code as usize)) {
        return i;
    }
    // Reading attributes must not disturb an exception being raised right now.
    let (mut t, mut v, mut tb) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    (api.err_fetch)(&mut t, &mut v, &mut tb);
    let text = |name: &CStr| -> String {
        let attr = (api.getattr)(code, name.as_ptr());
        if attr.is_null() {
            return "?".into();
        }
        let s = (api.as_utf8)(attr);
        let out = if s.is_null() {
            "?".into()
        } else {
            CStr::from_ptr(s).to_string_lossy().into_owned()
        };
        (api.decref)(attr);
        out
    };
    let names = (text(c"co_filename"), text(c"co_name"));
    (api.err_restore)(t, v, tb);
    (api.incref)(code);
    let mut table = CODE_NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let i = table.len() as u32;
    table.push(names);
    codes.insert(code as usize, i);
    i
}

/// For the writer: (file, function, line) of a synthetic Python address; `None` for
/// native addresses.
pub fn describe(ip: u64) -> Option<(String, String, u32)> {
    if ip & PYTHON_BIT == 0 {
        return None;
    }
    if ip == NO_GIL {
        return Some((
            String::new(),
            "[thread without the GIL: no Python frames read]".into(),
            0,
        ));
    }
    let index = ((ip & !PYTHON_BIT) >> LINE_BITS) as usize;
    let line = (ip & ((1 << LINE_BITS) - 1)) as u32;
    let table = CODE_NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let (file, function) = table.get(index)?.clone();
    Some((file, function, line))
}
