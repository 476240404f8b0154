//! The event record: one intercepted call.

use crate::api::{Api, Kind};
use crate::location::Location;
use crate::write::{JsonBuf, JsonOut};
use serde::{Deserialize, Serialize};

/// One intercepted call. Fixed-size, so the interposer's hot path can queue it without
/// allocating. Which of the optional fields are set depends on the API (see
/// `docs/trace-format.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds since the header's `start_mono_ns` (CLOCK_MONOTONIC). For frees and
    /// releases this is taken before the real call, for everything else after it, so
    /// that an address reused by the driver is never seen live twice.
    pub t: u64,
    /// Kernel thread id of the caller.
    pub tid: u32,
    /// Device ordinal of the caller's current context, -1 when there is none.
    pub dev: i32,
    pub api: Api,
    /// The call's return code, exactly as returned to the program.
    pub res: i32,
    /// Device pointer, virtual address, host pointer, array or pool handle; 0 if none.
    pub addr: u64,
    /// Bytes the call took, freed, reserved or mapped (pitch allocations: pitch x height).
    pub size: u64,
    pub stream: Option<u64>,
    pub pool: Option<u64>,
    /// `cuMemCreate` handle (create, release, map).
    pub handle: Option<u64>,
    /// `cuMemMap` offset into the handle.
    pub offset: Option<u64>,
    /// `cuMemGetInfo`: the free and total bytes returned to the program.
    pub free: Option<u64>,
    pub total: Option<u64>,
    /// Block annotations: the bytes the allocator's caller asked for (`size` is the block).
    pub requested: Option<u64>,
    /// Where the memory lives, for pool allocations and pool events (the pool's location
    /// and allocation type) and `cuMemCreate` (its properties); `Device` elsewhere.
    pub loc: Location,
    /// The NUMA node of a `HostNuma` location.
    pub numa: Option<u32>,
    /// Stack id (0: no stack recorded).
    pub stack: u64,
}

impl Event {
    /// A record with only the always-present fields set.
    pub fn new(t: u64, tid: u32, dev: i32, api: Api, res: i32) -> Event {
        Event {
            t,
            tid,
            dev,
            api,
            res,
            addr: 0,
            size: 0,
            stream: None,
            pool: None,
            handle: None,
            offset: None,
            free: None,
            total: None,
            requested: None,
            loc: Location::Device,
            numa: None,
            stack: 0,
        }
    }

    /// The kind of memory the call deals in: the API's, unless the memory's location says
    /// it is host memory or a managed pool's.
    pub fn kind(&self) -> Kind {
        match self.loc {
            Location::Device => self.api.kind(),
            Location::Managed => Kind::ManagedPool,
            _ => Kind::Host,
        }
    }

    /// Whether the call returned success.
    pub fn ok(&self) -> bool {
        self.res == 0
    }

    /// Appends this event as one JSON line (with its newline). Into a [`JsonBuf`], never
    /// allocates.
    pub fn write_json<O: JsonOut>(&self, out: &mut O) {
        // Formatted on the stack, keys as literals of known length, then copied once: the
        // writer formats every event, and this is most of its time.
        let mut b = JsonBuf::new();
        b.raw("{\"t\":");
        b.u64(self.t);
        b.raw(",\"tid\":");
        b.u64(self.tid as u64);
        b.raw(",\"dev\":");
        b.i64(self.dev as i64);
        b.raw(",\"api\":\"");
        b.raw(self.api.name());
        b.raw("\",\"res\":");
        b.i64(self.res as i64);
        macro_rules! field {
            ($key:literal, $value:expr) => {
                if let Some(v) = $value {
                    b.raw(concat!(",\"", $key, "\":"));
                    b.u64(v);
                }
            };
        }
        field!("addr", (self.addr != 0).then_some(self.addr));
        field!("size", (self.size != 0).then_some(self.size));
        field!("stream", self.stream);
        field!("pool", self.pool);
        field!("handle", self.handle);
        field!("offset", self.offset);
        field!("free", self.free);
        field!("total", self.total);
        field!("requested", self.requested);
        if self.loc != Location::Device {
            b.raw(",\"loc\":\"");
            b.raw(self.loc.name());
            b.raw("\"");
        }
        field!("numa", self.numa.map(u64::from));
        field!("stack", (self.stack != 0).then_some(self.stack));
        b.raw("}\n");
        out.bytes(b.as_bytes());
    }
}

/// The last record of a trace whose process ended normally. Its absence means the
/// process was killed (or is still running).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// Time of the end record, as in [`Event::t`].
    pub t: u64,
    /// Events written before this record.
    pub events: u64,
    /// `exit`, `_exit`, `exec`, `signal N`, or `write failed: WHY` (the process went on,
    /// its trace could not).
    pub reason: String,
    /// The most bytes the interposer's event queue held at once (its bound is
    /// `VRAMTRACE_QUEUE_MB`); absent from a crash handler's end record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_peak_bytes: Option<u64>,
}

/// How an end record whose trace the writer could not continue begins.
pub const WRITE_FAILED: &str = "write failed";

impl End {
    /// The reason, when the trace was cut because writing failed (a full disk).
    pub fn write_failure(&self) -> Option<&str> {
        self.reason
            .starts_with(WRITE_FAILED)
            .then_some(self.reason.as_str())
    }

    pub fn write_json(&self, out: &mut JsonBuf) {
        End::write_fields(self.t, self.events, &self.reason, out);
        if let Some(peak) = self.queue_peak_bytes {
            out.raw(",\"queue_peak_bytes\":");
            out.u64(peak);
        }
        out.raw("}}\n");
    }

    /// The end line from its parts, for a signal handler that cannot allocate an `End`.
    /// `reason` is written as it is: it must need no JSON escaping.
    pub fn write_parts(t: u64, events: u64, reason: &str, out: &mut JsonBuf) {
        End::write_fields(t, events, reason, out);
        out.raw("}}\n");
    }

    fn write_fields(t: u64, events: u64, reason: &str, out: &mut JsonBuf) {
        out.raw("{\"end\":{\"t\":");
        out.u64(t);
        out.raw(",\"events\":");
        out.u64(events);
        out.raw(",\"reason\":\"");
        out.raw(reason);
        out.raw("\"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest line an event can be still fits the stack buffer it is formatted in.
    #[test]
    fn the_longest_event_line_fits_and_reads_back() {
        for &api in Api::ALL {
            let e = Event {
                t: u64::MAX,
                tid: u32::MAX,
                dev: i32::MIN,
                api,
                res: i32::MIN,
                addr: u64::MAX,
                size: u64::MAX,
                stream: Some(u64::MAX),
                pool: Some(u64::MAX),
                handle: Some(u64::MAX),
                offset: Some(u64::MAX),
                free: Some(u64::MAX),
                total: Some(u64::MAX),
                requested: Some(u64::MAX),
                loc: Location::HostNumaCurrent,
                numa: Some(u32::MAX),
                stack: u64::MAX,
            };
            let mut line = Vec::new();
            e.write_json(&mut line);
            assert!(line.len() < JsonBuf::CAPACITY, "{}", line.len());
            assert_eq!(line.last(), Some(&b'\n'));
            let back: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(back["requested"], u64::MAX);
            assert_eq!(back["stack"], u64::MAX);
            assert_eq!(back["dev"], i32::MIN);
            assert_eq!(back["loc"], "host_numa_current");
        }
    }
}
