#!/usr/bin/env python3
"""Writes a PyTorch-snapshot-shaped history of N trace entries for benchmarking
`vramtrace whatif`: a training-like stream of tensors (many small, some large, lifetimes
from one step to many), each freed by the end. Addresses are names only (the stream has
no segments yet): `vramtrace whatif --capacity ... -o` turns it into a recording with
the model's own addresses and segment events.

    scripts/whatif-history.py 1000000 history.pickle
"""
import pickle
import random
import sys

n, path = int(sys.argv[1]), sys.argv[2]
rng = random.Random(1)
MIB = 1 << 20
trace, live, name = [], [], 0x10000


def size():
    r = rng.random()
    if r < 0.6:
        return int(2 ** rng.uniform(6, 20))          # 64 B .. 1 MiB: small pool
    if r < 0.95:
        return int(2 ** rng.uniform(20, 26))         # 1 .. 64 MiB
    return int(2 ** rng.uniform(26, 29))             # 64 .. 512 MiB


def entry(action, addr, size):
    return {'action': action, 'addr': addr, 'size': size, 'stream': 0, 'frames': []}


while len(trace) + 2 * len(live) < n - 3:
    if live and (len(live) > 400 or rng.random() < 0.5):
        # Mostly the youngest tensors die first, as activations do.
        i = len(live) - 1 - min(int(rng.expovariate(0.05)), len(live) - 1)
        addr, s = live.pop(i)
        trace += [entry('free_requested', addr, s), entry('free_completed', addr, s)]
    else:
        name += 0x1000
        s = size()
        live.append((name, s))
        trace.append(entry('alloc', name, s))
for addr, s in reversed(live):
    trace += [entry('free_requested', addr, s), entry('free_completed', addr, s)]
with open(path, 'wb') as f:
    pickle.dump({'segments': [], 'device_traces': [trace]}, f, protocol=4)
print(len(trace))
