//! The report's comparison with `--baseline`: `diff`'s verdict for each GPU, under the
//! run's own verdict; the baseline's lines are on the plots themselves.

use super::esc;
use super::Report;
use std::fmt::Write;

pub fn section(o: &mut String, r: &Report, notes: &mut Vec<String>) {
    let Some(b) = r.baseline else {
        return;
    };
    let _ = write!(
        o,
        "<section id=\"vt-baseline\" class=\"baseline\"><h2>Against the baseline</h2><p class=\"muted\">A: <code>{}</code>; B: this run. Its lines are drawn dashed and lighter on each GPU's plot, both runs' times from their own start; the capacity drawn is this run's card.</p>",
        esc(&b.name)
    );
    for d in &b.diff.devices {
        // The text view's verdict, its terminal colours taken out.
        let line = crate::render::diff::verdict(d);
        let plain = anstream::adapter::strip_str(&line).to_string();
        let _ = write!(o, "<p>{}</p>", esc(&plain));
    }
    if b.diff.devices.is_empty() {
        o.push_str("<p>The two runs used no GPU in common.</p>");
    }
    for (gpus, only) in [
        (&b.diff.only_in_a, "the baseline"),
        (&b.diff.only_in_b, "this run"),
    ] {
        for g in gpus {
            let _ = write!(o, "<p>{}: only in {only}</p>", esc(g));
        }
    }
    let _ = writeln!(o, "</section>");
    if b.cut_at_run_end {
        notes.push(
            "the baseline ran more than 4 times longer than this run: its lines are drawn up to this run's end only (the time axis is this run's), so its later peak may not be on the plot"
                .to_string(),
        );
    }
    if !b.not_drawn.is_empty() {
        notes.push(format!(
            "the baseline's {} not drawn: this run has no plot of them",
            b.not_drawn.join(", ")
        ));
    }
}
