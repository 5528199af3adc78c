#!/usr/bin/env python3
"""Per-kernel timeline of one decode step of `smelt-run bench` from an Nsight Systems trace.

The GPU machine has no nsys on its PATH, but Nsight Compute's folder carries one (host/target-linux-x64/nsys) and its
QdstrmImporter (host/linux-desktop-glibc_2_11_3-x64, which needs libdw.so.1: Debian's libdw1 package, copied with
libelf / liblzma / libbz2 / libzstd into a folder on LD_LIBRARY_PATH). docs/performance.md "Session 13" has the
commands. This script reads the `nsys stats --report cuda_gpu_trace --format csv` table:

  scripts/gpu_timeline.py trace.csv [--step N] [--kernels K] [--sublayers]

It finds the decode graph's replays (the kernels of one graph launch share a correlation id; K = the plan's kernels per
step, 160 for the V4.1 slice) and prints the N-th last one, one line per kernel in start order: start and end
(us from the step's first kernel), duration, `after` = end minus the latest end of the kernels before it (how long
the kernel ran past everything started before it: with programmatic dependent launch a kernel starts early and waits,
so its duration overstates its cost; `after` is its share of the step when the work is serial), grid and name.
--sublayers then sums `after` between the sublayer seams (the smelt_hc_seam* kernels that end every attention and FFN
sublayer, and the step's end): each sublayer's span and its largest kernels, the per-layer critical path that
docs/performance.md "Session 25" tabulates against its floor. A sublayer end that ran unfused (the V4.1 slice's layer 0
FFN, whose Engram op sits between its expand and the next collapse) joins two sublayers into one span.
"""
import argparse
import csv
import sys
from collections import defaultdict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--step", type=int, default=1, help="the N-th last replay (default 1: the last)")
    ap.add_argument("--kernels", type=int, default=0, help="kernels per step (default: the most common launch size)")
    ap.add_argument("--sublayers", action="store_true", help="also sum `after` between the sublayer seams")
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    by = defaultdict(list)
    for r in rows:
        if r.get("GrdX"):  # kernels only (memcpy / memset rows have no grid)
            by[r["CorrId"]].append(r)
    sizes = defaultdict(int)
    for v in by.values():
        if len(v) > 8:
            sizes[len(v)] += 1
    if not sizes:
        print("no graph launches found", file=sys.stderr)
        return 1
    k = a.kernels or max(sizes, key=lambda n: (sizes[n], n))
    steps = [c for c, v in by.items() if len(v) == k]
    if len(steps) < a.step:
        print(f"only {len(steps)} launches of {k} kernels", file=sys.stderr)
        return 1
    ks = sorted(by[steps[-a.step]], key=lambda r: int(r["Start (ns)"]))
    t0 = int(ks[0]["Start (ns)"])
    end_all = t0
    print(f"{'#':>3} {'start':>8} {'end':>8} {'dur':>7} {'after':>7}  grid            kernel")
    per_name = defaultdict(float)
    segments = [[]]  # [(name, after us)] per sublayer, closed by a seam kernel
    for i, r in enumerate(ks):
        s = int(r["Start (ns)"])
        e = s + int(r["Duration (ns)"])
        after = max(0, e - end_all)
        per_name[r["Name"]] += after / 1e3
        segments[-1].append((r["Name"], after / 1e3))
        if r["Name"].startswith("smelt_hc_seam"):
            segments.append([])
        grid = f"{r['GrdX']}x{r['GrdY']}x{r['GrdZ']}"
        print(f"{i:3d} {(s - t0) / 1e3:8.2f} {(e - t0) / 1e3:8.2f} {(e - s) / 1e3:7.2f} {after / 1e3:7.2f}  {grid:15s} {r['Name']}")
        end_all = max(end_all, e)
    print(f"step span {(end_all - t0) / 1e3:.2f} us, {len(ks)} kernels; `after` by kernel:")
    for name, us in sorted(per_name.items(), key=lambda x: -x[1]):
        print(f"  {us:8.2f} us  {name}")
    if a.sublayers:
        print("sublayers (between seams; the last one holds the head): span us, then its largest `after`s")
        for n, seg in enumerate(s for s in segments if s):
            top = sorted(seg, key=lambda x: -x[1])[:6]
            print(f"  {n:2d} {sum(x[1] for x in seg):8.2f} us  {len(seg):3d} kernels  " +
                  ", ".join(f"{name.removeprefix('smelt_')} {us:.1f}" for name, us in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
