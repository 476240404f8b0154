#!/usr/bin/env python3
"""A large PyTorch memory snapshot made from a real one, for benchmarks and tests.

    scripts/big-snapshot.py SOURCE.pickle OUT.pickle MEGABYTES

The source's history (every device's `device_traces`) is repeated until the file reaches
about MEGABYTES, each copy shifted in time so that `time_us` keeps increasing. Entries are
new dicts, but their `frames` lists and frame dicts are the source's own objects, so the
pickler shares them by memo reference as PyTorch's does (one list per distinct stack).
Segments stay those of the source. Prints the number of history entries written.
"""
import io
import pickle
import sys


def main():
    source, out, megabytes = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with open(source, "rb") as f:
        snap = pickle.load(f)
    if not isinstance(snap, dict) or not any(snap.get("device_traces", [])):
        sys.exit(f"{source}: no history to repeat")
    traces = snap["device_traces"]
    # The first copy carries the shared frames; each further copy only references them.
    def size(n):
        return len(pickle.dumps([[dict(e) for e in t * n] for t in traces], protocol=4))
    first, more = size(1), max(1, size(2) - size(1))
    copies = max(1, 1 + int((megabytes * (1 << 20) - first) / more))
    span = 1 + max((e.get("time_us", 0) for t in traces for e in t), default=0) - min(
        (e.get("time_us", 0) for t in traces for e in t), default=0)
    out_traces = []
    for t in traces:
        entries = []
        for c in range(copies):
            for e in t:
                e = dict(e)
                if "time_us" in e:
                    e["time_us"] += c * span
                entries.append(e)
        out_traces.append(entries)
    big = dict(snap, device_traces=out_traces)
    buf = io.BytesIO()
    pickle.dump(big, buf, protocol=4)
    with open(out, "wb") as f:
        f.write(buf.getbuffer())
    print(sum(len(t) for t in out_traces))


if __name__ == "__main__":
    main()
