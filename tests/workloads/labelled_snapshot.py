"""A PyTorch snapshot whose tensors carry PyTorch's own labels, and its ground truth.

usage: labelled_snapshot.py write PATH
       labelled_snapshot.py labels PATH N

`write`: one device with a default-pool segment, a private pool's segment made in the
history, one made before it, and one freed and made again at its address (a tensor of the
first making was in no pool); `user_metadata` as strings, "N/A", a dict, and one over
4096 bytes; `annotate` entries (`_annotate_tensor`) of a tensor, twice of another, of one
from before the history, and one of a freed tensor.

`labels`: Python's own reading of the file: the live tensors after the history's first N
entries (all: -1), their bytes summed by [user_metadata, pool, annotations] (null and []
where none); a tensor's annotations are all its allocation got, before or after entry N. It
follows the segments forward and names a tensor's pool where the segment it was
allocated in is one of the final ones.
"""

import json
import pickle
import sys


def write(path):
    M = 1 << 20
    fr = lambda name, line: [{"filename": "train.py", "line": line, "name": name}]
    A, P, Q, R = [(1 << 32) + k * 256 * M for k in range(4)]
    trace, t = [], [10]
    def e(action, addr, size, frames=(), meta=""):
        t[0] += 1
        trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t[0],
                      "frames": list(frames), "user_metadata": meta, "compile_context": "N/A"})
    e("segment_alloc", A, 20 * M, fr("f", 1))
    e("alloc", A, 4 * M, fr("f", 2), "comm")
    e("annotate", A, 0, fr("k", 7), "retained by autograd")
    e("alloc", A + 4 * M, 2 * M, fr("f", 2), "N/A")
    e("annotate", Q, 0, fr("k", 8), "from before")
    e("segment_alloc", R, 2 * M, fr("r", 1))
    e("alloc", R, M, fr("r", 2), "first")
    e("free_requested", R, M, fr("r", 2))
    e("free_completed", R, M, fr("r", 2))
    e("segment_free", R, 2 * M, fr("r", 3))
    e("annotate", R, 0, fr("k", 9), "of a freed tensor")
    e("segment_alloc", P, 20 * M, fr("g", 3))
    e("alloc", P, 3 * M, fr("g", 4), "graph")
    e("annotate", P, 0, fr("k", 7), "a")
    e("annotate", P, 0, fr("k", 7), "b")
    e("alloc", P + 3 * M, 5 * M, fr("g", 4), "L" * 5000)
    e("alloc", A + 6 * M, 3 * M, fr("f", 5), {"step": 3, "stage": "warmup", "warm": True})
    e("segment_alloc", R, 2 * M, fr("r", 1))
    e("alloc", R, M, fr("r", 2), "second")
    def blk(addr, size, frames=(), state="active_allocated"):
        return {"address": addr, "size": size, "requested_size": size, "state": state,
                "frames": list(frames)}
    def seg(addr, size, pool, blocks):
        used = sum(b["size"] for b in blocks if b["state"] != "inactive")
        return {"device": 0, "address": addr, "total_size": size, "allocated_size": used,
                "active_size": used, "requested_size": used, "stream": 0,
                "segment_type": "large", "segment_pool_id": pool, "blocks": blocks}
    segments = [
        seg(A, 20 * M, (0, 0), [blk(A, 4 * M, fr("f", 2)), blk(A + 4 * M, 2 * M, fr("f", 2)),
                                blk(A + 6 * M, 3 * M, fr("f", 5)),
                                blk(A + 9 * M, 11 * M, state="inactive")]),
        seg(P, 20 * M, (1, 0), [blk(P, 3 * M, fr("g", 4)), blk(P + 3 * M, 5 * M, fr("g", 4)),
                                blk(P + 8 * M, 12 * M, state="inactive")]),
        seg(Q, 2 * M, (2, 3), [blk(Q, M, fr("h", 9)), blk(Q + M, M, state="inactive")]),
        seg(R, 2 * M, (3, 0), [blk(R, M, fr("r", 2)), blk(R + M, M, state="inactive")]),
    ]
    with open(path, "wb") as f:
        pickle.dump({"segments": segments, "device_traces": [trace]}, f)


def labels(path, n):
    with open(path, "rb") as f:
        d = pickle.load(f)
    trace = d["device_traces"][0]
    # Segments by making: the one each address's tensor was allocated in; the makings
    # alive at the end are the final segments'.
    def walk(upto):
        made, live_segs, tensors, live = 0, {}, {}, {}
        for i, e in enumerate(trace[:upto] if upto >= 0 else trace):
            a = e["action"]
            if a == "segment_alloc":
                made += 1
                live_segs[e["addr"]] = (made, e["size"])
            elif a == "segment_free":
                live_segs.pop(e["addr"])
            elif a == "alloc":
                seg = next(m for s, (m, size) in live_segs.items() if s <= e["addr"] < s + size)
                tensors[e["addr"]] = (e["size"], text(e["user_metadata"]), seg, i)
            elif a == "free_completed":
                tensors.pop(e["addr"])
        return live_segs, tensors
    # Annotations by the alloc entry of the tensor they name (by address: from before).
    notes, live, made = {}, {}, set()
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            live[e["addr"]] = i
            made.add(e["addr"])
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
        elif e["action"] == "annotate":
            if e["addr"] in live:
                notes.setdefault(live[e["addr"]], []).append(e["user_metadata"])
            elif e["addr"] not in made:
                notes.setdefault(("before", e["addr"]), []).append(e["user_metadata"])
    def text(m):
        # A dict's values as Python's str of each; a string as it is.
        if isinstance(m, dict):
            return {k: str(v) for k, v in m.items()} or None
        return None if m in ("", "N/A") or len(m) > 4096 else m
    live_segs, _ = walk(-1)
    _, tensors = walk(n)
    final = {s["address"]: (live_segs.get(s["address"], (None,))[0], s["segment_pool_id"])
             for s in d["segments"]}
    # Tensors from before the history: the final blocks no alloc entry made.
    allocated = {e["addr"] for e in trace if e["action"] == "alloc"}
    before = [(b["address"], b["size"], s["segment_pool_id"]) for s in d["segments"]
              for b in s["blocks"] if b["state"] == "active_allocated" and b["address"] not in allocated]
    out = {}
    def add(size, meta, pool, annotations):
        pool = None if tuple(pool or (0, 0)) == (0, 0) else list(pool)
        key = json.dumps([meta, pool, annotations])
        out[key] = out.get(key, 0) + size
    for addr, size, pool in before:
        add(size, None, pool, notes.get(("before", addr), []))
    for addr, (size, meta, seg, i) in tensors.items():
        pool = next((p for (m, p) in final.values() if m == seg), None)
        add(size, meta, pool, notes.get(i, []))
    return [[json.loads(k), v] for k, v in sorted(out.items())]


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        print(json.dumps(labels(sys.argv[2], int(sys.argv[3]))))
