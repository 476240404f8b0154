//! `vramtrace whatif [--set KEY:VALUE ...] [--capacity SIZE] [--compare] [--json]
//! [-o OUT.pickle] SNAPSHOT`: replays a PyTorch snapshot's history through a model of the
//! caching allocator, under the recorded settings or others, on a card of a given size.

use super::common;
use super::whatif_render::{self, Column, Device};
use crate::snapshot::{write_memory_viz, DeviceSnapshot};
use crate::units::{bytes, parse_size};
use crate::whatif::avoid::recorded_card;
use crate::whatif::replay::{Driver, Outcome};
use crate::whatif::search::smallest_capacity;
use crate::whatif::{replay, write, Settings};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct WhatifArgs {
    /// A setting in PYTORCH_CUDA_ALLOC_CONF's vocabulary (max_split_size_mb:128,
    /// roundup_power2_divisions:4, garbage_collection_threshold:0.8, ...) or
    /// per_process_memory_fraction:F; repeatable. With --compare, each is one alternative.
    #[arg(long = "set", value_name = "KEY:VALUE")]
    pub set: Vec<String>,
    /// Memory the allocator may reserve on each device (e.g. 24GiB): the card's size less
    /// what is used outside the allocator. Default: the recorded settings as the recorded
    /// run's driver answered; other settings on the card a recorded out-of-memory error
    /// shows, else without limit.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub capacity: Option<u64>,
    /// One table: the recorded settings beside each --set (and the recorded settings on
    /// --capacity).
    #[arg(long)]
    pub compare: bool,
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Skip the search for the smallest card (up to 17 more replays per scenario).
    #[arg(long)]
    pub no_search: bool,
    /// Write the replayed run (the last scenario) as a snapshot for pytorch.org/memory_viz.
    #[arg(short = 'o', value_name = "OUT.pickle")]
    pub output: Option<PathBuf>,
    /// A PyTorch memory snapshot with a trace (`torch.cuda.memory._dump_snapshot()`), a
    /// `vramtrace run` directory with the PyTorch hook's snapshot of one process, or one
    /// process's trace whose allocator annotated its blocks (vramtrace.h).
    #[arg(value_name = "SNAPSHOT.pickle|DIR|TRACE.jsonl")]
    pub path: PathBuf,
}

/// One column of the report: settings and a driver.
struct Scenario {
    name: String,
    settings: Settings,
    driver: Driver,
}

/// `checkable`: the input is PyTorch's recording, which the first scenario reproduces;
/// else (a trace's annotations) the first scenario is PyTorch's defaults on the card.
fn scenarios(
    args: &WhatifArgs,
    recorded: &Settings,
    checkable: bool,
) -> Result<Vec<Scenario>, String> {
    let as_recorded = if checkable {
        Scenario {
            name: "recorded".into(),
            settings: recorded.clone(),
            driver: Driver::Recorded,
        }
    } else {
        Scenario {
            name: "defaults".into(),
            settings: recorded.clone(),
            driver: Driver::Card(None),
        }
    };
    let on_card = Driver::Card(args.capacity);
    if !args.compare {
        if args.set.is_empty() && args.capacity.is_none() {
            return Ok(vec![as_recorded]);
        }
        let mut settings = recorded.clone();
        for s in &args.set {
            settings.set(s)?;
        }
        return Ok(vec![Scenario {
            name: settings.describe(),
            settings,
            driver: on_card,
        }]);
    }
    let mut out = vec![as_recorded];
    if let Some(c) = args.capacity {
        out.push(Scenario {
            name: format!("recorded on {}", bytes(c)),
            settings: recorded.clone(),
            driver: on_card,
        });
    }
    for s in &args.set {
        let mut settings = recorded.clone();
        settings.set(s)?;
        out.push(Scenario {
            name: s.clone(),
            settings,
            driver: on_card,
        });
    }
    Ok(out)
}

pub fn whatif(args: WhatifArgs) -> Result<i32, String> {
    let src = crate::whatif::source::open(&args.path, args.output.is_some())?;
    for p in &src.problems {
        eprintln!("vramtrace: {}", crate::render::escape::terminal(p));
    }
    let (name, recorded, hs, layer) = (&src.name, &src.recorded, &src.histories, &src.layer);
    let scenarios = scenarios(&args, recorded, src.checkable)?;
    let mut devices: Vec<Device> = Vec::new();
    for h in hs {
        // No card where the recorded replay stops before its failure (a private pool) or
        // cannot run (the scenarios below say why).
        let card = recorded_card(h).unwrap_or(None);
        let layer = layer.get(&h.device).copied();
        // Without --capacity: the card the device layer shows, else the one a recorded
        // out-of-memory error shows.
        let capacity = args
            .capacity
            .or(layer.map(|l| l.capacity()))
            .or(card.map(|c| c.0));
        let mut cols = Vec::new();
        for sc in &scenarios {
            let driver = match sc.driver {
                Driver::Card(None) => Driver::Card(capacity),
                d => d,
            };
            let outcome = replay(h, &sc.settings, driver, args.output.is_some())
                .map_err(|e| format!("{name}: device {}: {e}", h.device))?;
            let search = if args.no_search {
                None
            } else {
                Some(
                    smallest_capacity(h, &sc.settings)
                        .map_err(|e| format!("{name}: device {}: {e}", h.device))?,
                )
            };
            cols.push(Column {
                name: sc.name.clone(),
                outcome,
                smallest: search.as_ref().and_then(|s| s.smallest),
                search_replays: search.map_or(0, |s| s.replays),
            });
        }
        devices.push(Device {
            h,
            card,
            layer,
            capacity,
            cols,
        });
    }
    if let Some(out) = &args.output {
        let pairs: Vec<(&Outcome, &DeviceSnapshot)> = devices
            .iter()
            .filter_map(|d| Some((&d.cols.last()?.outcome, src.snap.device(d.h.device)?)))
            .collect();
        let settings = &scenarios.last().expect("one scenario at least").settings;
        let mut written = write::snapshot(pairs, settings);
        written.device_count = src.snap.device_count;
        write_memory_viz(out, &written)?;
    }
    if args.json {
        let devs: Vec<Value> = devices.iter().map(whatif_render::device_json).collect();
        let doc = json!({
            "format": "vramtrace-whatif", "version": 1,
            "path": name,
            "recorded_settings": recorded.describe(),
            "capacity_bytes": args.capacity,
            "devices": devs,
        });
        common::print_json(&doc)?;
    } else {
        let mut out = String::new();
        if src.checkable {
            let _ = writeln!(out, "{name}: recorded settings {}", recorded.describe());
        } else {
            let _ = writeln!(
                out,
                "{name}: the requests its allocator annotated, replayed through PyTorch's caching allocator"
            );
        }
        for d in &devices {
            whatif_render::text(&mut out, d);
        }
        common::print(&out)?;
    }
    Ok(0)
}
