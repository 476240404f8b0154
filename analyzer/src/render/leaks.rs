//! `leaks` as text.

use super::escape::terminal as t;
use crate::units;
use crate::views::leaks::{LeakGroup, Leaks};
use std::fmt::Write;

pub fn text(v: &Leaks, limit: usize) -> String {
    let mut o = String::new();
    let reserved_first = v.layer == "reserved";
    if reserved_first || v.both_layers {
        reserved(&mut o, v, limit);
    }
    if !reserved_first {
        // Tensors first: inside reserved memory a caching allocator keeps anyway, they
        // are where a leak shows.
        let mut first = String::new();
        tensors(&mut first, v, limit);
        o.insert_str(0, &first);
    } else if v.both_layers && !v.tensor_groups.is_empty() {
        tensors(&mut o, v, limit);
    }
    o
}

fn reserved(o: &mut String, v: &Leaks, limit: usize) {
    if v.groups.is_empty() {
        let _ = writeln!(
            o,
            "reserved layer: no leaks: every device allocation was freed"
        );
        return;
    }
    let _ = writeln!(
        o,
        "never freed (reserved layer): {} of device memory in {}{}",
        units::bytes(v.leaked_bytes),
        units::count(v.leaked_blocks, "block"),
        if v.leaked_pinned_host_bytes > 0 {
            format!(
                ", and {} of pinned host memory",
                units::bytes(v.leaked_pinned_host_bytes)
            )
        } else {
            String::new()
        }
    );
    table(o, &v.groups, limit);
}

fn tensors(o: &mut String, v: &Leaks, limit: usize) {
    if v.tensor_groups.is_empty() {
        let _ = writeln!(o, "allocated layer: no leaks: every tensor was freed");
        return;
    }
    let _ = writeln!(
        o,
        "tensors never freed (allocated layer, requested bytes): {} in {}",
        units::bytes(v.leaked_tensor_bytes),
        units::count(v.leaked_tensors, "tensor")
    );
    table(o, &v.tensor_groups, limit);
}

fn table(o: &mut String, groups: &[LeakGroup], limit: usize) {
    let _ = writeln!(
        o,
        "  {:>12}  {:>6}  {:>8}  {:>6}  {:<8}  {:>19}  who allocated",
        "bytes", "blocks", "pid", "device", "kind", "allocated (s)"
    );
    for g in groups.iter().take(limit) {
        let cut = if g.complete {
            ""
        } else {
            "  (process killed: live when it stopped)"
        };
        let _ = writeln!(
            o,
            "  {:>12}  {:>6}  {:>8}  {:>6}  {:<8}  {:>19}  {}{cut}",
            units::bytes(g.bytes),
            g.blocks,
            g.pid,
            g.device,
            g.kind,
            format!(
                "{}-{}",
                units::seconds(g.first_time_ns),
                units::seconds(g.last_time_ns)
            ),
            t(&g.who())
        );
    }
    if groups.len() > limit {
        let _ = writeln!(
            o,
            "  ... {} more groups (--json lists all)",
            groups.len() - limit
        );
    }
}
