#!/usr/bin/env python3
"""Where one kernel's warps stall, per SASS instruction, from an Nsight Compute source export.

On the GPU machine (docs/performance.md "Session 15" and "Session 16" have the device scripts):

  ncu -k regex:KERNEL -c 1 --section WarpStateStats --section SourceCounters -o R smelt-run bench PLAN ...
  ncu --import R.ncu-rep --page source --csv --print-source sass > src.csv

then, anywhere:

  scripts/ncu_source.py src.csv [--top N] [--loop-min E]

It prints the stall reasons over all samples; the same split into the instructions a warp runs a few times (the
prologue, the staging, the epilogue: executed fewer than E times, default twice the kernel's first instruction's count,
i.e. its warps) and the loop's;
the distinct instructions executed; where in its 128-byte line of code each `no_instruction` sample sits (a pile on
slot 0 means instruction-cache misses: every new line of code a warp reaches waits for its fetch); the opcode mix
weighted by executions; and the N instructions with the most samples.
"""
import argparse
import collections
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # The export starts with a "Kernel Name" line, then the header.
    start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr = rows[start]
    ix = {h: i for i, h in enumerate(hdr)}
    for need in ("Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if need not in ix:
            sys.exit(f"error: {path} has no column '{need}' (export with --page source --csv --print-source sass)")
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    out = []
    for r in rows[start + 1:]:
        if len(r) < len(hdr) or not r[0].startswith("0x"):
            continue
        num = lambda h: int(float(r[ix[h]] or 0))  # noqa: E731
        out.append({
            "addr": int(r[0], 16),
            "sass": r[ix["Source"]].strip(),
            "samples": num("Warp Stall Sampling (All Samples)"),
            "executed": num("Instructions Executed"),
            "stalls": {h[len("stall_"):]: num(h) for h in stalls},
        })
    return out


def summary(label, instrs, width=6):
    tot = collections.Counter()
    for i in instrs:
        tot.update(i["stalls"])
    samples = sum(i["samples"] for i in instrs)
    executed = sum(i["executed"] for i in instrs)
    top = " ".join(f"{k}={v}" for k, v in tot.most_common(width) if v)
    print(f"{label}: {len(instrs)} instructions, {executed} warp instructions executed, {samples} samples  {top}")


def opcode(sass):
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15, help="instructions with the most samples to list")
    ap.add_argument("--loop-min", type=int, default=0,
                    help="executions from which an instruction counts as the loop's (default: 2 x the warps, the "
                         "first instruction's executions)")
    a = ap.parse_args()
    instrs = sorted((i for i in load(a.csv) if i["executed"] > 0), key=lambda i: i["addr"])
    if not instrs:
        sys.exit("error: no executed instructions in the export")
    summary("all", instrs)
    loop_min = a.loop_min or 2 * instrs[0]["executed"]
    summary(f"once (executed < {loop_min})", [i for i in instrs if i["executed"] < loop_min])
    summary(f"loop (executed >= {loop_min})", [i for i in instrs if i["executed"] >= loop_min])
    slots = [0] * 8
    for i in instrs:
        slots[(i["addr"] % 128) // 16] += i["stalls"].get("no_inst", 0)
    print("no_instruction samples by slot in the 128-byte code line:", slots)
    mix = collections.Counter()
    for i in instrs:
        mix[opcode(i["sass"])] += i["executed"]
    total = sum(mix.values())
    print("opcodes by executions:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in mix.most_common(12)))
    print(f"top {a.top} instructions by samples:")
    for i in sorted(instrs, key=lambda i: -i["samples"])[:a.top]:
        main2 = sorted(((v, k) for k, v in i["stalls"].items() if v), reverse=True)[:2]
        why = ", ".join(f"{k} {v}" for v, k in main2)
        print(f"  {i['addr'] & 0xFFFFF:05x} {i['samples']:6d} samples  executed {i['executed']:8d}  {i['sass'][:56]:56s} {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
