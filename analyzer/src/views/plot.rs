//! What a plot of one GPU shows: its layers on one clock (device, reserved, allocated),
//! its capacity, its peak, each failed allocation, and the program's markers and phases.
//! `timeline --svg` and `report` draw the same plots (render/plot.rs).

use super::marks::{Marker, Marks, Phase};
use super::oom::OomView;
use super::summary::Summary;
use super::timeline::{Timeline, TimelineSeries};
use super::timeline_categories::index;
use crate::replay::devices::gpu_label;
use serde::Serialize;

/// Points kept per line: a plot is a few hundred pixels wide; the hover read-out and
/// the live-set moments carry the rest.
pub const MAX_POINTS: usize = 1_000;
/// Markers and phases drawn per plot.
pub const MAX_MARKS: usize = 200;
/// Lines drawn per plot.
const MAX_LINES: usize = 8;

#[derive(Serialize, Clone, Debug)]
pub struct DevicePlot {
    pub host: String,
    pub gpu: String,
    /// `GPU 3`, or `host GPU 3` when the run spans hosts.
    pub title: String,
    /// The ranks of the processes on it (a rank on two GPUs is on both), in rank order.
    pub ranks: Vec<String>,
    pub lines: Vec<Line>,
    /// The allocated layer (or, for a program without tensors, the reserved layer) split
    /// by category, stacked bottom to top in the categories' order, where the GPU had one
    /// process (under other processes' lines, one's areas would read as the GPU's).
    pub areas: Vec<Area>,
    /// The device's total memory, where the driver or NVML said it.
    pub capacity_bytes: Option<u64>,
    /// The reserved layer's peak (every process on the GPU summed).
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    pub failures: Vec<FailureMark>,
    pub markers: Vec<Marker>,
    pub phases: Vec<Phase>,
    /// Markers and phases of its processes left out beyond [`MAX_MARKS`].
    pub marks_left_out: u64,
    /// Points were merged to [`MAX_POINTS`] per line (each keeps its bucket's most).
    pub points_merged: bool,
    /// How much time a point stands for (the timeline's bucket, times the merging): a
    /// zoom narrower than a few of them shows markers and moments, not finer lines.
    pub bucket_ns: u64,
}

#[derive(Serialize, Clone, Debug)]
pub struct Line {
    /// `device`, `reserved`, `allocated` (annotated blocks, or a PyTorch snapshot's
    /// tensors), `cached_free`.
    pub layer: &'static str,
    /// `all processes`, or `pid N` / `pid N rank R` / a snapshot's file name.
    pub who: String,
    /// (bucket start, most bytes in the bucket)
    pub points: Vec<(u64, u64)>,
    /// Another run's line, drawn for comparison (`report --baseline`).
    pub baseline: bool,
}

#[derive(Serialize, Clone, Debug)]
pub struct Area {
    /// `tensors:parameters`, `reserved:parameters`, ...: the timeline's layer of the
    /// category.
    pub layer: &'static str,
    /// The process, as a line names it.
    pub who: String,
    /// (bucket start, the category's bytes when the tensors summed most in the bucket)
    pub points: Vec<(u64, u64)>,
}

#[derive(Serialize, Clone, Debug)]
pub struct FailureMark {
    pub time_ns: u64,
    pub requested_bytes: u64,
    pub pid: u32,
    pub rank: Option<String>,
    /// The failing process's own ordinal for this GPU.
    pub device: i32,
}

impl DevicePlot {
    /// The last moment the plot shows of its own run: its lines' last points (a
    /// baseline's left out), failures, markers, phases and peak.
    pub fn end_ns(&self) -> u64 {
        let lines = self
            .lines
            .iter()
            .filter(|l| !l.baseline)
            .filter_map(|l| l.points.last().map(|x| x.0));
        let failures = self.failures.iter().map(|f| f.time_ns);
        let markers = self.markers.iter().map(|m| m.time_ns);
        let phases = self.phases.iter().map(|ph| ph.end_ns);
        lines
            .chain(failures)
            .chain(markers)
            .chain(phases)
            .chain([self.peak_time_ns])
            .max()
            .unwrap_or(0)
    }
}

/// The layers a plot shows, in drawing order; fragmentation's details stay in the JSON
/// and CSV.
fn shown(layer: &str) -> Option<usize> {
    ["device", "reserved", "allocated"]
        .iter()
        .position(|l| *l == layer)
}

/// One plot per GPU of the timeline, in the timeline's order.
pub fn build(t: &Timeline, marks: &Marks, summary: &Summary, oom: &OomView) -> Vec<DevicePlot> {
    let mut gpus: Vec<(&str, &str)> = t
        .series
        .iter()
        .map(|s| (s.host.as_str(), s.gpu.as_str()))
        .collect();
    gpus.sort();
    gpus.dedup();
    let many_hosts = gpus.iter().any(|g| g.0 != gpus[0].0);
    gpus.iter()
        .map(|&(host, gpu)| device(t, marks, summary, oom, host, gpu, many_hosts))
        .collect()
}

fn device(
    t: &Timeline,
    marks: &Marks,
    summary: &Summary,
    oom: &OomView,
    host: &str,
    gpu: &str,
    many_hosts: bool,
) -> DevicePlot {
    let mut series: Vec<&TimelineSeries> = t
        .series
        .iter()
        .filter(|s| s.host == host && s.gpu == gpu && shown(s.layer).is_some())
        .collect();
    let processes = series
        .iter()
        .filter(|s| s.scope == "process" && s.layer == "reserved")
        .count();
    if processes <= 1 {
        // One process: its reserved line is the run's.
        series.retain(|s| s.scope == "run" || s.layer != "reserved");
    }
    // The run's reserved line first, then each process's layers.
    series.sort_by_key(|s| (s.scope != "run", shown(s.layer)));
    series.truncate(MAX_LINES);
    let points_merged = series.iter().any(|s| s.points.len() > MAX_POINTS);
    let merge = series
        .iter()
        .map(|s| s.points.len().div_ceil(MAX_POINTS).max(1))
        .max()
        .unwrap_or(1);
    let lines = series
        .iter()
        .map(|s| Line {
            layer: s.layer,
            who: who(s, summary),
            points: merged(s),
            baseline: false,
        })
        .collect();
    let areas = areas(t, summary, host, gpu);
    let run_device = summary
        .devices
        .iter()
        .find(|d| d.host == host && d.gpu == gpu);
    let pids: Vec<u32> = run_device.map(|d| d.pids.clone()).unwrap_or_default();
    let failures: Vec<FailureMark> = oom
        .failures
        .iter()
        .filter(|f| f.host == host && f.gpu == gpu)
        .map(|f| FailureMark {
            time_ns: f.time_ns,
            requested_bytes: f.requested_bytes,
            pid: f.pid,
            rank: f.rank.clone(),
            device: f.device,
        })
        .collect();
    let capacity_bytes = marks
        .capacity
        .iter()
        .find(|(id, _)| id.host == host && id.gpu == gpu)
        .map(|(_, &c)| c)
        .or_else(|| {
            oom.failures
                .iter()
                .filter(|f| f.host == host && f.gpu == gpu)
                .find_map(|f| f.driver_total_bytes)
        });
    let mine = |pid: &u32| pids.contains(pid) || (pids.is_empty() && summary.devices.len() <= 1);
    let markers: Vec<Marker> = marks
        .markers
        .iter()
        .filter(|m| mine(&m.pid))
        .cloned()
        .collect();
    let phases: Vec<Phase> = marks
        .phases
        .iter()
        .filter(|p| mine(&p.pid))
        .cloned()
        .collect();
    let marks_left_out = (markers.len().saturating_sub(MAX_MARKS)
        + phases.len().saturating_sub(MAX_MARKS)) as u64
        + marks.dropped;
    DevicePlot {
        host: host.to_string(),
        gpu: gpu.to_string(),
        title: gpu_label(host, gpu, many_hosts),
        ranks: super::ranks::of_pids(summary, host, &pids),
        lines,
        areas,
        capacity_bytes,
        peak_bytes: run_device.map_or(0, |d| d.peak_reserved_bytes),
        peak_time_ns: run_device.map_or(0, |d| d.peak_time_ns),
        failures,
        markers: markers.into_iter().take(MAX_MARKS).collect(),
        phases: phases.into_iter().take(MAX_MARKS).collect(),
        marks_left_out,
        points_merged,
        bucket_ns: t.resolution_ns.saturating_mul(merge as u64),
    }
}

/// A plot's heading in the report: a section per rank and device. `Rank 1 · GPU 1` where
/// one rank ran on the GPU (a rank on two GPUs has two sections); `GPU 0 · ranks 0, 1`
/// where ranks shared it (one plot: their memory is summed on the card, each rank's
/// reserved line drawn apart); the GPU alone without ranks.
pub fn heading(p: &DevicePlot) -> String {
    match p.ranks.as_slice() {
        [] => p.title.clone(),
        [rank] => format!("Rank {rank} · {}", p.title),
        ranks => {
            let shown: Vec<&str> = ranks.iter().take(8).map(String::as_str).collect();
            let more = if ranks.len() > 8 { ", ..." } else { "" };
            format!("{} · ranks {}{more}", p.title, shown.join(", "))
        }
    }
}

fn who(s: &TimelineSeries, summary: &Summary) -> String {
    match s.pid {
        Some(pid) => super::process_name::with_rank(summary, &s.host, pid),
        None => "all processes".into(),
    }
}

/// The category areas of one GPU: its one process's category series, merged to
/// [`MAX_POINTS`] as one (each merged point is the one where their sum is most).
fn areas(t: &Timeline, summary: &Summary, host: &str, gpu: &str) -> Vec<Area> {
    let series: Vec<&TimelineSeries> = t
        .series
        .iter()
        .filter(|s| s.host == host && s.gpu == gpu && index(s.layer).is_some())
        .collect();
    let Some(first) = series.first() else {
        return Vec::new();
    };
    if series
        .iter()
        .any(|s| s.pid != first.pid || s.device != first.device)
    {
        return Vec::new();
    }
    // Under the lines of other processes too, one process's areas would read as the GPU's.
    let shared = summary
        .devices
        .iter()
        .find(|d| d.host == host && d.gpu == gpu)
        .is_some_and(|d| d.pids.len() > 1);
    if shared {
        return Vec::new();
    }
    let n = series.iter().map(|s| s.points.len()).min().unwrap_or(0);
    let per = n.div_ceil(MAX_POINTS).max(1);
    let sum = |i: usize| {
        series
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.points[i].max_bytes))
    };
    let picks: Vec<(u64, usize)> = (0..n)
        .step_by(per)
        .map(|start| {
            let end = (start + per).min(n);
            let most = (start..end).max_by_key(|&i| (sum(i), std::cmp::Reverse(i)));
            (series[0].points[start].time_ns, most.unwrap_or(start))
        })
        .collect();
    let mut areas: Vec<Area> = series
        .iter()
        .map(|s| Area {
            layer: s.layer,
            who: who(s, summary),
            points: picks
                .iter()
                .map(|&(t, i)| (t, s.points[i].max_bytes))
                .collect(),
        })
        .collect();
    areas.sort_by_key(|a| index(a.layer));
    areas
}

/// The series' points, neighbours merged (keeping the most) down to [`MAX_POINTS`].
fn merged(s: &TimelineSeries) -> Vec<(u64, u64)> {
    let per = s.points.len().div_ceil(MAX_POINTS).max(1);
    s.points
        .chunks(per)
        .map(|c| {
            let most = c.iter().map(|p| p.max_bytes).max().unwrap_or(0);
            (c[0].time_ns, most)
        })
        .collect()
}
