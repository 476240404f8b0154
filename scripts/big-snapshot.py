#!/usr/bin/env python3
"""A large PyTorch memory snapshot made from a real one, for benchmarks and tests.

    scripts/big-snapshot.py [--segments] SOURCE.pickle OUT.pickle MEGABYTES

The source's history (every device's `device_traces`) is repeated until the file reaches
about MEGABYTES, each copy shifted in time so that `time_us` keeps increasing. Entries are
new dicts, but their `frames` lists and frame dicts are the source's own objects, so the
pickler shares them by memo reference as PyTorch's does (one list per distinct stack).
Segments stay those of the source: a history-heavy file.

With `--segments`, each copy is also shifted in address space past the one before, and
the source's final segments are copied with it likewise: a segment-heavy file, as a
long-running job that keeps its memory would leave (each copy's segments are still held
at the end, so the file stays consistent from its first entry to its final segments).

Prints the number of history entries, segments and blocks written.
"""
import io
import pickle
import sys


def main():
    args = sys.argv[1:]
    shift = "--segments" in args
    args = [a for a in args if a != "--segments"]
    source, out, megabytes = args[0], args[1], float(args[2])
    with open(source, "rb") as f:
        snap = pickle.load(f)
    if not isinstance(snap, dict) or not any(snap.get("device_traces", [])):
        sys.exit(f"{source}: no history to repeat")
    traces = snap["device_traces"]
    segments = snap.get("segments", [])
    span = 1 + max((e.get("time_us", 0) for t in traces for e in t), default=0) - min(
        (e.get("time_us", 0) for t in traces for e in t), default=0)
    stride = 0
    if shift:
        # Past the highest address any segment or entry of the source reaches, in 2 MiB
        # pages (a segment's alignment), so that no copy overlaps another.
        addressed = [e for t in traces for e in t if "addr" in e]
        starts = [s["address"] for s in segments] + [e["addr"] for e in addressed]
        ends = [s["address"] + s["total_size"] for s in segments]
        ends += [e["addr"] + e.get("size", 0) for e in addressed]
        page = 1 << 21
        stride = (max(ends) - min(starts) + page) // page * page

    def copied(copies):
        out_traces = []
        for t in traces:
            entries = []
            for c in range(copies):
                for e in t:
                    e = dict(e)
                    if "time_us" in e:
                        e["time_us"] += c * span
                    if shift and "addr" in e:
                        e["addr"] += c * stride
                    entries.append(e)
            out_traces.append(entries)
        out_segments = segments
        if shift:
            out_segments = []
            for c in range(copies):
                for seg in segments:
                    seg = dict(seg, address=seg["address"] + c * stride)
                    seg["blocks"] = [
                        dict(b, address=b["address"] + c * stride) if "address" in b else b
                        for b in seg.get("blocks", [])
                    ]
                    out_segments.append(seg)
        return dict(snap, device_traces=out_traces, segments=out_segments)

    # The first copy carries the shared frames; each further copy only references them.
    def size(n):
        return len(pickle.dumps(copied(n), protocol=4))
    first, more = size(1), max(1, size(2) - size(1))
    copies = max(1, 1 + int((megabytes * (1 << 20) - first) / more))
    big = copied(copies)
    out_traces, out_segments = big["device_traces"], big["segments"]
    buf = io.BytesIO()
    pickle.dump(big, buf, protocol=4)
    with open(out, "wb") as f:
        f.write(buf.getbuffer())
    blocks = sum(len(seg.get("blocks", [])) for seg in out_segments)
    print(sum(len(t) for t in out_traces), len(out_segments), blocks)


if __name__ == "__main__":
    main()
