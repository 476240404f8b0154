//! Private pools (CUDA graphs, `torch.cuda.MemPool`): the model does not replay them. Their
//! segments, which the snapshot names by `segment_pool_id`, serve no default-pool request,
//! and a request recorded in one stops the replay there, saying why.

use vramtrace_analyzer::allocator::sizes::Pool;
use vramtrace_analyzer::allocator::{StartBlock, StartSegment};
use vramtrace_analyzer::whatif::input::{Event, History, PrivateSegment, Span};
use vramtrace_analyzer::whatif::search::smallest_capacity;
use vramtrace_analyzer::whatif::{replay, Driver};

const MIB: u64 = 1 << 20;
const P: u64 = 0x7f0000000000;
const D: u64 = 0x7f1000000000;

/// A graph pool's 20 MiB segment holds one 5 MiB block and 15 MiB free. A 5 MiB request
/// of the default pool gets a segment of its own (PyTorch never looks in a private pool's
/// blocks for it); then a request recorded in the graph pool's segment.
fn history() -> History {
    let mut h = History {
        start: vec![StartSegment {
            addr: P,
            size: 20 * MIB,
            stream: 0,
            blocks: vec![StartBlock {
                addr: P,
                size: 5 * MIB,
                requested: 5 * MIB,
                pending_free: false,
                freed_inside: false,
            }],
            pool: Pool::Large,
            expandable: false,
        }],
        private: vec![PrivateSegment {
            addr: P,
            size: 20 * MIB,
            pool: (1, 0),
        }],
        ..Default::default()
    };
    let seg = Span {
        addr: D,
        size: 20 * MIB,
        stream: 0,
    };
    h.push(Event::SegmentAlloc(seg), 0);
    let (size, stream) = (5 * MIB, 0);
    h.push(
        Event::Alloc {
            size,
            stream,
            addr: D,
        },
        1,
    );
    h.push(
        Event::Alloc {
            size,
            stream,
            addr: P + 5 * MIB,
        },
        2,
    );
    h.push(
        Event::Alloc {
            size,
            stream,
            addr: D + 5 * MIB,
        },
        3,
    );
    h
}

#[test]
fn a_private_pools_free_blocks_serve_no_default_request() {
    let h = history();
    let o = replay(&h, &h.settings, Driver::Recorded, true).unwrap();
    assert_eq!(o.drift, None);
    assert_eq!(o.trace[1].addr, D, "the default request's own segment");
}

#[test]
fn a_request_in_a_private_pool_stops_the_replay_and_says_why() {
    let h = history();
    for driver in [Driver::Recorded, Driver::Card(None)] {
        let o = replay(&h, &h.settings, driver, false).unwrap();
        let stop = o.not_modelled.as_ref().expect("stops");
        assert_eq!(stop.entry, 2);
        assert!(
            stop.message.contains("private pool (1, 0)"),
            "{}",
            stop.message
        );
        assert_eq!(o.replayed, 3, "up to the entry it stopped at, not entry 3");
        assert!(!o.fits(), "a replay stopped short says nothing of the card");
    }
    assert_eq!(smallest_capacity(&h, &h.settings).unwrap().smallest, None);
}

/// A failure after the private pool's request: no verdict on what would have avoided it.
#[test]
fn the_oom_post_mortem_gives_no_verdict_past_a_private_pools_request() {
    let mut h = history();
    let oom = Event::Oom {
        size: 100 * MIB,
        device_free: Some(0),
        stream: 0,
    };
    h.push(oom, 4);
    let err = vramtrace_analyzer::whatif::avoid::avoided_by(&h, 4).unwrap_err();
    assert!(err.contains("private pool (1, 0)"), "{err}");
}
