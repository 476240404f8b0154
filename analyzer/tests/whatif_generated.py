# Histories that exercise one allocator rule each, with every address, block size and
# segment event worked out by hand from the rules of PyTorch's CUDACachingAllocator.cpp,
# written as snapshots by Python's own pickle. Bookkeeping only: the final segments are
# the live blocks (sizes given by hand) with the gaps between them free.
import json, pickle, sys
out = sys.argv[1]
KIB, MIB = 1 << 10, 1 << 20
expected = {}

def e(action, addr, size, stream):
    return {'action': action, 'addr': addr, 'size': size, 'stream': stream, 'frames': []}

class H:
    def __init__(self, settings=None):
        self.trace, self.segs, self.live, self.settings = [], {}, {}, settings
        self.maps = []
        self.pools = {}
    def seg(self, addr, size, stream=0):
        self.trace.append(e('segment_alloc', addr, size, stream))
        self.segs[addr] = (size, stream)
    def segfree(self, addr):
        size, stream = self.segs.pop(addr)
        self.trace.append(e('segment_free', addr, size, stream))
    def alloc(self, addr, req, block, stream=0):
        self.trace.append(e('alloc', addr, req, stream))
        self.live[addr] = (block, req, stream, 'active_allocated')
    def free_requested(self, addr):
        b, req, st, _ = self.live[addr]
        self.trace.append(e('free_requested', addr, req, st))
        self.live[addr] = (b, req, st, 'active_pending_free')
    def free_completed(self, addr):
        b, req, st, _ = self.live.pop(addr)
        self.trace.append(e('free_completed', addr, req, st))
    def free(self, addr):
        self.free_requested(addr)
        self.free_completed(addr)
    def oom(self, req, stream=0):
        self.trace.append({'action': 'oom', 'addr': 0, 'size': req, 'stream': stream,
                           'device_free': 0, 'frames': []})
    def map(self, addr, size, stream=0, kind='large'):
        self.trace.append(e('segment_map', addr, size, stream))
        self.maps.append([addr, size, stream, kind])
    def unmap(self, addr, size):
        self.trace.append(e('segment_unmap', addr, size, 0))
        keep = []
        for a, s, st, k in self.maps:
            if a < addr + size and addr < a + s:
                if a < addr: keep.append([a, addr - a, st, k])
                if addr + size < a + s: keep.append([addr + size, a + s - addr - size, st, k])
            else:
                keep.append([a, s, st, k])
        self.maps = keep
    def dump(self, name, cut=0):
        segments = []
        # An expandable segment shows as one segment per run of mapped pages.
        runs = []
        for a, s, st, k in sorted(self.maps):
            if runs and runs[-1][0] + runs[-1][1] == a:
                runs[-1][1] += s
            else:
                runs.append([a, s, st, k])
        expandable = {a: k for a, s, st, k in runs}
        for a, s, st, k in runs:
            self.segs[a] = (s, st)
        for addr, (size, stream) in sorted(self.segs.items()):
            blocks, at = [], addr
            for a in sorted(x for x in self.live if addr <= x < addr + size):
                b, req, st, state = self.live[a]
                if a > at:
                    blocks.append({'address': at, 'size': a - at, 'requested_size': 0, 'state': 'inactive', 'frames': []})
                blocks.append({'address': a, 'size': b, 'requested_size': req, 'state': state, 'frames': []})
                at = a + b
            if at < addr + size:
                blocks.append({'address': at, 'size': addr + size - at, 'requested_size': 0, 'state': 'inactive', 'frames': []})
            kind = expandable.get(addr, 'small' if size == 2 * MIB else 'large')
            segments.append({'device': 0, 'address': addr, 'total_size': size, 'stream': stream,
                             'segment_type': kind, 'segment_pool_id': self.pools.get(addr, (0, 0)),
                             'is_expandable': addr in expandable, 'frames': [], 'blocks': blocks})
        for a, s, st, k in runs:
            del self.segs[a]
        snap = {'segments': segments, 'device_traces': [self.trace[cut:]]}
        if self.settings is not None:
            snap['allocator_settings'] = self.settings
        with open(f'{out}/{name}.pickle', 'wb') as f:
            pickle.dump(snap, f)

def settings(max_split=-1, divisions=0, expandable=False):
    return {'PYTORCH_CUDA_ALLOC_CONF': '', 'max_split_size': max_split,
            'garbage_collection_threshold': 0.0, 'expandable_segments': expandable,
            'roundup_power2_divisions': {str(1 << i): divisions for i in range(16)}}

# Small pool: requests round up to 512 bytes; a 2 MiB segment; a free block splits when
# 512 bytes or more remain; best fit takes the smallest block, then the lowest address;
# a freed block merges with free neighbours.
A = 0x7f0000000000
h = H()
h.seg(A, 2 * MIB); h.alloc(A, 100, 512)
h.alloc(A + 512, 1000, 1024)
h.alloc(A + 1536, 600000, 600064)
h.free(A + 512)
h.alloc(A + 512, 700, 1024)          # the 1024-byte hole, not the large tail
h.free(A)
h.alloc(A, 300, 512)                 # the 512-byte hole
h.free(A + 1536)                     # merges with the tail
h.alloc(A + 1536, MIB, MIB)          # 1 MiB is still the small pool
h.dump('small_pool')

# Large pool: a 20 MiB segment under 10 MiB; 2 MiB rounding at 10 MiB and over; a block
# splits only when more than 1 MiB remains; per-stream pools.
L1, L2, L3, L4 = 0x7f1000000000, 0x7f1100000000, 0x7f1200000000, 0x7f1300000000
h = H()
h.seg(L1, 20 * MIB); h.alloc(L1, 5 * MIB, 5 * MIB)
h.seg(L2, 18 * MIB); h.alloc(L2, 17 * MIB + 1, 18 * MIB)   # 1 MiB - 512 left: not split
h.alloc(L1 + 5 * MIB, 3 * MIB, 3 * MIB)
drift_at = len(h.trace)
h.alloc(L1 + 8 * MIB, 11 * MIB + 100, 12 * MIB)            # the rest of L1, unsplit
h.free(L1 + 5 * MIB)
h.alloc(L1 + 5 * MIB, 2 * MIB, 3 * MIB)                     # 1 MiB left: not split
h.seg(L3, 20 * MIB); h.alloc(L3, MIB + 1, MIB + 512)
h.free(L1)
h.seg(L4, 20 * MIB, stream=7); h.alloc(L4, 4 * MIB, 4 * MIB, stream=7)  # stream 7's own pool
h.alloc(L1, 4 * MIB, 5 * MIB)                               # stream 0: the 5 MiB hole
h.dump('large_pool')

# The same history with one allocation recorded elsewhere than the rules put it.
h = H()
h.seg(L1, 20 * MIB); h.alloc(L1, 5 * MIB, 5 * MIB)
h.seg(L2, 18 * MIB); h.alloc(L2, 17 * MIB + 1, 18 * MIB)
h.alloc(L1 + 5 * MIB, 3 * MIB, 3 * MIB)
h.alloc(L1 + 9 * MIB, 11 * MIB + 100, 11 * MIB)
h.dump('drift')
expected['drift'] = {'entry': drift_at, 'recorded': L1 + 9 * MIB, 'replayed': L1 + 8 * MIB}

# max_split_size_mb:40: oversize blocks are never split, never serve a smaller request,
# serve a larger one only within 20 MiB; a failed cudaMalloc frees the smallest oversize
# cached block that covers the request (not every cached segment) and retries.
O1, O2, O4 = 0x7f2000000000, 0x7f2100000000, 0x7f2300000000
h = H(settings(max_split=40 * MIB))
h.seg(O1, 70 * MIB); h.alloc(O1, 70 * MIB, 70 * MIB); h.free(O1)
h.seg(O2, 30 * MIB); h.alloc(O2, 30 * MIB, 30 * MIB); h.free(O2)
h.segfree(O1)                      # 44 MiB + 1: the 70 MiB block is over 20 MiB too big
h.seg(O4, 46 * MIB); h.alloc(O4, 44 * MIB + 1, 46 * MIB)  # oversize: unsplit
h.dump('max_split')
h.settings = None     # as PyTorch before 2.4 wrote it: the settings only in torch-PID.json
h.dump('max_split_unrecorded')

# Out of memory: cudaMalloc fails, every wholly free cached segment is freed (large pool
# first, by size then address, then the small pool; a split one stays) and the request
# retried; then a request that fails again.
S, P1, P2, P3 = 0x7f3000000000, 0x7f3100000000, 0x7f3200000000, 0x7f3300000000
h = H()
h.seg(S, 2 * MIB); h.alloc(S, 100, 512); h.alloc(S + 512, 100, 512); h.free(S + 512)
h.seg(P1, 20 * MIB); h.alloc(P1, 6 * MIB, 6 * MIB)
h.seg(P2, 16 * MIB); h.alloc(P2, 16 * MIB, 16 * MIB)
h.free(P1); h.free(P2)
h.segfree(P2); h.segfree(P1)
h.seg(P3, 30 * MIB); h.alloc(P3, 30 * MIB, 30 * MIB)
h.oom(100 * MIB)
h.dump('oom_release')

# empty_cache(): frees every wholly free cached segment, in the same order; recorded
# between requests, it is replayed where it was.
E1, E2, E3, E4 = 0x7f4000000000, 0x7f4100000000, 0x7f4200000000, 0x7f4300000000
h = H()
h.seg(E1, 20 * MIB); h.alloc(E1, 8 * MIB, 8 * MIB)
h.seg(E2, 2 * MIB); h.alloc(E2, 1000, 1024)
h.seg(E3, 40 * MIB); h.alloc(E3, 40 * MIB, 40 * MIB)
h.free(E1); h.free(E2); h.free(E3)
h.segfree(E1); h.segfree(E3); h.segfree(E2)
h.seg(E4, 20 * MIB); h.alloc(E4, MIB + 1, MIB + 512)
h.free(E4); h.segfree(E4)
h.dump('empty_cache')

# roundup_power2_divisions:4: sizes round up to a quarter of their power-of-two interval.
R, T = 0x7f5000000000, 0x7f5100000000
h = H(settings(divisions=4))
h.seg(R, 20 * MIB); h.alloc(R, 1258291, 1310720)            # 1.2 MiB -> 1.25 MiB
h.alloc(R + 1310720, 3 * MIB + 1, 3 * MIB + 512 * KIB)       # -> 3.5 MiB
h.alloc(R + 1310720 + 3 * MIB + 512 * KIB, 4 * MIB, 4 * MIB)  # a power of two stays
h.seg(T, 2 * MIB); h.alloc(T, 4500, 5120)                     # 4 KiB + 1 KiB steps
h.alloc(T + 5120, 2000, 2048)                                 # under 4 x 512: plain
h.dump('roundup')

# Record-stream frees: a block freed but pending is not reused until its free completes.
Q = 0x7f6000000000
h = H()
h.seg(Q, 20 * MIB); h.alloc(Q, 4 * MIB, 4 * MIB)
h.free_requested(Q)
h.alloc(Q + 4 * MIB, 4 * MIB, 4 * MIB)
h.free_completed(Q)
h.alloc(Q, 4 * MIB, 4 * MIB)
h.alloc(Q + 8 * MIB, MIB * 2, 2 * MIB)
h.free_requested(Q + 8 * MIB)
h.dump('pending_free')

# The trace starts late (a wrapped ring buffer): blocks allocated before it and freed in
# it have sizes the trace does not give; the state at its start is rebuilt.
K, K2 = 0x7f7000000000, 0x7f7100000000
h = H()
h.seg(K, 20 * MIB); h.alloc(K, 19 * MIB + 512 * KIB, 20 * MIB)   # 0.5 MiB left: unsplit
h.seg(K2, 2 * MIB); h.alloc(K2, 700, 1024); h.alloc(K2 + 1024, 700, 1024)
cut = len(h.trace)
h.free(K)
h.free(K2)
h.alloc(K, 15 * MIB, 15 * MIB)
h.alloc(K2, 512, 512)
h.dump('late_start', cut=cut)
expected['late_start'] = {'start_reserved': 22 * MIB}

# A block allocated before the trace, unsplit, with a free block after it: its size is
# where the next block the trace allocates while it is live begins (the space up to the
# segment's end would have been split). A 4 MiB request took a free 4.5 MiB block whole
# (0.5 MiB left is no large-pool block); the trace then allocates 8 MiB right after it.
J = 0x7f7200000000
h = H()
h.seg(J, 20 * MIB); h.alloc(J, 4 * MIB + 512 * KIB, 4 * MIB + 512 * KIB)
h.alloc(J + 4 * MIB + 512 * KIB, 15 * MIB + 512 * KIB, 15 * MIB + 512 * KIB)
h.free(J); h.alloc(J, 4 * MIB, 4 * MIB + 512 * KIB)
h.free(J + 4 * MIB + 512 * KIB)
cut = len(h.trace)
h.alloc(J + 4 * MIB + 512 * KIB, 8 * MIB, 8 * MIB)
h.free(J)
h.dump('late_start_unsplit', cut=cut)

# For the card: a 20 MiB segment cached, then a 30 MiB request.
C1, C2, C3 = 0x7f8000000000, 0x7f8100000000, 0x7f8200000000
h = H()
h.seg(C1, 20 * MIB); h.alloc(C1, 5 * MIB, 5 * MIB); h.free(C1)
h.seg(C2, 30 * MIB); h.alloc(C2, 30 * MIB, 30 * MIB)
h.dump('card')

# Garbage collection: 20 MiB cached, 24 MiB held, then 30 MiB more.
h = H()
h.seg(C1, 20 * MIB); h.alloc(C1, 5 * MIB, 5 * MIB); h.free(C1)
h.seg(C2, 24 * MIB); h.alloc(C2, 24 * MIB, 24 * MIB)
h.seg(C3, 30 * MIB); h.alloc(C3, 30 * MIB, 30 * MIB)
h.dump('gc')

# An out-of-memory error that max_split_size_mb:128 avoids on the same 240 MiB card: the
# cached 200 MiB segment, split for a 30 MiB request, can no longer hold 200 MiB; as an
# oversize block it would not have been split (30 MiB gets a segment of its own, 230 MiB
# reserved) and would serve the 200 MiB request. roundup_power2_divisions:4 rounds 30 MiB
# to 32 MiB and fails the same way.
V = 0x7f9000000000
h = H()
h.seg(V, 200 * MIB); h.alloc(V, 200 * MIB, 200 * MIB); h.free(V)
h.alloc(V, 30 * MIB, 30 * MIB)
h.oom(200 * MIB)
h.trace[-1]['device_free'] = 40 * MIB
h.dump('avoidable')

# expandable_segments:True: one reservation per stream and pool, pages mapped as needed
# (20 MiB in the large pool, 2 MiB in the small one, counted from the reservation's start)
# at the lowest address where a free block and the unmapped space after it fit the request.
X, Y = 0x7fa000000000, 0x7fc000000000   # reservations of 90 GiB (the default 80 GiB card)
h = H(settings(expandable=True))
h.map(X, 20 * MIB); h.alloc(X, 5 * MIB, 5 * MIB)             # a new reservation; every block splits
h.map(X + 20 * MIB, 20 * MIB)                                 # the free 15 MiB grows by a page
h.alloc(X + 5 * MIB, 30 * MIB, 30 * MIB)                      # ... and holds 30 MiB: one segment
h.map(Y, 2 * MIB, kind='small'); h.alloc(Y, 1000, 1024)       # the small pool's own reservation
h.alloc(X + 35 * MIB, 3 * MIB, 3 * MIB)                       # 2 MiB left before the unmapped tail
h.free(X + 5 * MIB)
# 2 MiB fits the 2 MiB block exactly, but that block can grow into the unmapped tail, so
# best fit counts it that large and takes the next larger block, the freed 30 MiB.
h.alloc(X + 5 * MIB, 2 * MIB, 2 * MIB)
h.free(X + 35 * MIB)                                          # 33 MiB free up to the tail
h.free(Y)
# empty_cache(): the whole pages inside free blocks are unmapped (large pool first); the
# small reservation, then all unmapped, is given back without a trace entry.
h.unmap(X + 20 * MIB, 20 * MIB); h.unmap(Y, 2 * MIB)
h.map(X + 20 * MIB, 20 * MIB); h.alloc(X + 7 * MIB, 25 * MIB, 25 * MIB)  # 13 MiB free + a page
h.oom(50 * MIB)                                               # 8 MiB + pages: no memory
h.dump('expandable')
expected['expandable'] = {'peak_reserved': 42 * MIB, 'end_reserved': 40 * MIB}

# expandable_segments:True: pages unmapped between two held blocks leave a hole, which the
# next request that fits maps again (the lowest address first), before the unmapped end.
h = H(settings(expandable=True))
h.map(X, 20 * MIB); h.alloc(X, 20 * MIB, 20 * MIB)             # a whole page: no split
h.map(X + 20 * MIB, 20 * MIB); h.alloc(X + 20 * MIB, 20 * MIB, 20 * MIB)
h.map(X + 40 * MIB, 20 * MIB); h.alloc(X + 40 * MIB, 20 * MIB, 20 * MIB)
h.free(X + 20 * MIB)
h.unmap(X + 20 * MIB, 20 * MIB)                                # empty_cache(): the hole
h.map(X + 20 * MIB, 20 * MIB); h.alloc(X + 20 * MIB, 10 * MIB, 10 * MIB)  # the hole, not the end
h.map(X + 60 * MIB, 20 * MIB); h.alloc(X + 60 * MIB, 15 * MIB, 15 * MIB)  # 10 MiB left there: the end
h.dump('expandable_hole')
expected['expandable_hole'] = {'peak_reserved': 80 * MIB}

# A trace that disagrees with its final segments: a block allocated and never freed that
# the segments do not hold.
h = H()
h.seg(A, 2 * MIB); h.alloc(A, 100, 512)
h.live.clear()
h.dump('inconsistent')

# A private pool (a CUDA graph's, or torch.cuda.MemPool's): its segment, named by the
# final segments' segment_pool_id, serves a request the model does not replay.
h = H()
h.seg(A, 2 * MIB); h.alloc(A, 100, 512)
h.seg(L1, 20 * MIB); h.pools[L1] = (1, 0)
h.alloc(L1, 5 * MIB, 5 * MIB)
h.dump('private_pool')
expected['private_pool'] = {'stopped_at_entry': 3}

with open(f'{out}/expected.json', 'w') as f:
    json.dump(expected, f)
