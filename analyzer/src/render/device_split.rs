//! One line for a device's memory split whole ([`DeviceSplit`]), saying how each part is
//! known.

use crate::views::device_split::{self, DeviceSplit, Part};

/// `parameters 1.2 GiB, ..., context and driver 300 MiB (categories named by the
/// program's ranges; context and driver: NVML's figure less reserved)`.
pub fn line(s: &DeviceSplit) -> String {
    let has = |f: fn(Part) -> bool| s.parts.iter().any(|p| f(p.part));
    let mut how = Vec::new();
    match s.known_by {
        Some("annotated") => how.push("categories named by the program's ranges"),
        Some("inferred") => how.push("categories inferred from frames"),
        Some(_) => how.push("categories recorded from the program's objects"),
        None => {}
    }
    if has(|p| matches!(p, Part::Library(_))) {
        how.push("libraries by their frames");
    }
    if has(|p| p == Part::ContextAndDriver) {
        how.push("context and driver: NVML's figure less reserved");
    }
    let how = if how.is_empty() {
        String::new()
    } else {
        format!(" ({})", how.join("; "))
    };
    format!("{}{how}", device_split::words(s))
}
