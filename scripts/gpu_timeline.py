#!/usr/bin/env python3
"""Per-kernel timeline of one decode step of `smelt-run bench` from an Nsight Systems trace.

The GPU machine has no nsys on its PATH, but Nsight Compute's folder carries one (host/target-linux-x64/nsys) and its
QdstrmImporter (host/linux-desktop-glibc_2_11_3-x64, which needs libdw.so.1: Debian's libdw1 package, copied with
libelf / liblzma / libbz2 / libzstd into a folder on LD_LIBRARY_PATH). docs/performance.md "Session 13" has the
commands. This script reads the `nsys stats --report cuda_gpu_trace --format csv` table:

  scripts/gpu_timeline.py trace.csv [--step N] [--kernels K]

It finds the decode graph's replays (the kernels of one graph launch share a correlation id; K = the plan's kernels per
step, 160 for the V4.1 slice) and prints the N-th last one, one line per kernel in start order: start and end
(us from the step's first kernel), duration, `after` = end minus the latest end of the kernels before it (how long
the kernel ran past everything started before it: with programmatic dependent launch a kernel starts early and waits,
so its duration overstates its cost; `after` is its share of the step when the work is serial), grid and name.
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
    for i, r in enumerate(ks):
        s = int(r["Start (ns)"])
        e = s + int(r["Duration (ns)"])
        after = max(0, e - end_all)
        per_name[r["Name"]] += after / 1e3
        grid = f"{r['GrdX']}x{r['GrdY']}x{r['GrdZ']}"
        print(f"{i:3d} {(s - t0) / 1e3:8.2f} {(e - t0) / 1e3:8.2f} {(e - s) / 1e3:7.2f} {after / 1e3:7.2f}  {grid:15s} {r['Name']}")
        end_all = max(end_all, e)
    print(f"step span {(end_all - t0) / 1e3:.2f} us, {len(ks)} kernels; `after` by kernel:")
    for name, us in sorted(per_name.items(), key=lambda x: -x[1]):
        print(f"  {us:8.2f} us  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
