#!/usr/bin/env python3
"""scripts/ncu_source.py on a hand-made Nsight Compute source export (the layout `ncu --import R --page source --csv
--print-source sass` writes): a kernel of 10 warps with a 16-instruction prologue run once a warp, whose two code lines
each start with an instruction-cache miss, and an 8-instruction loop run 5 times a warp.
usage: check_ncu_source.py SCRIPT WORK_DIR"""
import csv
import os
import subprocess
import sys


def main():
    script, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "src.csv")
    hdr = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
           "# Samples", "Instructions Executed", "stall_no_inst", "stall_wait", "stall_long_sb",
           "stall_no_inst (Not Issued)"]
    rows = []
    base = 0x7F0000001000  # 128-byte aligned, as kernels are
    for k in range(16):  # prologue: two lines of 8 instructions, executed once by each of 10 warps
        no_inst = 7 if k % 8 == 0 else 0  # the first instruction of each line waits for its fetch
        long_sb = 4 if k == 5 else 0
        src = "LDG.E.128 R12, desc[UR8][R50.64]" if k == 5 else ("@!P0 IADD3 R1, R2, R3, RZ" if k == 3 else
                                                                  "IMAD R22, R14, 0x1e0, RZ")
        rows.append([hex(base + 16 * k), "      " + src, no_inst + long_sb, no_inst + long_sb, no_inst + long_sb, 10,
                     no_inst, 0, long_sb, no_inst])
    for k in range(8):  # loop: 8 instructions, 5 iterations a warp
        rows.append([hex(base + 256 + 16 * k), "      HMMA.16816.F32 R16, R16, R12, RZ", 3, 3, 3, 50, 0, 3, 0, 0])
    rows.append([hex(base + 384), "      EXIT", 0, 0, 0, 0, 0, 0, 0, 0])  # never executed: left out
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", "smelt_test_kernel", ""])
        w.writerow(hdr)
        w.writerows(rows)
    out = subprocess.run([sys.executable, script, path, "--top", "2"], capture_output=True, text=True)
    print(out.stdout, out.stderr)
    if out.returncode != 0:
        return 1
    expect = [
        "all: 24 instructions, 560 warp instructions executed, 42 samples  wait=24 no_inst=14 long_sb=4",
        "once (executed < 20): 16 instructions, 160 warp instructions executed, 18 samples  no_inst=14 long_sb=4",
        "loop (executed >= 20): 8 instructions, 400 warp instructions executed, 24 samples  wait=24",
        "no_instruction samples by slot in the 128-byte code line: [14, 0, 0, 0, 0, 0, 0, 0]",
        "opcodes by executions: HMMA 71.4%, IMAD 25.0%, IADD3 1.8%, LDG 1.8%",
    ]
    lines = out.stdout.splitlines()
    bad = [e for e in expect if e not in lines]
    top = [l for l in lines if "samples  executed" in l]
    if len(top) != 2 or "no_inst 7" not in top[0] or "no_inst 7" not in top[1]:
        bad.append("the top two instructions: the two line starts with 7 no_inst samples each")
    if bad:
        print("FAILED, missing:\n  " + "\n  ".join(bad))
        return 1
    # A file without the source columns: a clear error, not a traceback.
    with open(os.path.join(work, "bad.csv"), "w") as f:
        f.write('"Kernel Name","k"\n"Address","Source"\n')
    bad_run = subprocess.run([sys.executable, script, os.path.join(work, "bad.csv")], capture_output=True, text=True)
    if bad_run.returncode == 0 or "has no column" not in bad_run.stderr:
        print("FAILED: the export without sample columns was not refused clearly:", bad_run.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
