#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu_build.sh: a per-kernel timeline of a plan's decode graph (Nsight Systems
# trace of `smelt-run bench`, one replay printed by scripts/gpu_timeline.py). docs/performance.md "Session 13".
# usage: scripts/gpu_timeline.sh PLAN [OUT_DIR=timeline] [LIBS]
#   LIBS: a folder holding libdw.so.1 and what it links (libelf, liblzma, libbz2, libzstd), which the report importer
#   needs and the GPU machine lacks; copy them from a Debian 12 machine with libdw1 installed, e.g.
#   mkdir -p gpu_extra/lib && for l in libdw.so.1 libelf.so.1 liblzma.so.5 libbz2.so.1.0 libzstd.so.1; do
#     cp -L /usr/lib/x86_64-linux-gnu/$l gpu_extra/lib/ 2>/dev/null || cp -L /lib/x86_64-linux-gnu/$l gpu_extra/lib/; done
# (BUILD=build dir, default build-gpu; PROMPT=4096, STEPS=8; NSIGHT=the Nsight Compute folder, default the newest
# /opt/nvidia/nsight-compute/*)
set -euo pipefail
cd "$(dirname "$0")/.."
PLAN=${1:?usage: scripts/gpu_timeline.sh PLAN [OUT_DIR] [LIBS]}
OUT=${2:-timeline}
LIBS=${3:-gpu_extra/lib}
BUILD=${BUILD:-build-gpu}
NSIGHT=${NSIGHT:-$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | sort | tail -1)}
NSYS=$(command -v nsys || echo "${NSIGHT%/}/host/target-linux-x64/nsys")
IMPORTER="${NSIGHT%/}/host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter"
[ -x "$NSYS" ] || { echo "error: no nsys (PATH or $NSYS)"; exit 1; }
mkdir -p "$OUT"
rm -f "$OUT/prof.qdstrm" "$OUT/prof.nsys-rep" "$OUT/prof.sqlite"
"$NSYS" profile -o "$OUT/prof" --force-overwrite true --trace cuda --cuda-graph-trace node --sample none \
  --cpuctxsw none "$BUILD/bin/smelt-run" bench "$PLAN" --synthetic-weights 1 --prompt-len "${PROMPT:-4096}" \
  --steps "${STEPS:-8}" --states synthetic > "$OUT/bench.txt" 2>&1
# A complete nsys writes the report itself; the one inside Nsight Compute leaves the raw stream for the importer.
if [ ! -f "$OUT/prof.nsys-rep" ]; then
  [ -x "$IMPORTER" ] || { echo "error: no report and no importer at $IMPORTER"; exit 1; }
  LD_LIBRARY_PATH="$(cd "$LIBS" 2>/dev/null && pwd):${LD_LIBRARY_PATH:-}" "$IMPORTER" -i "$OUT/prof.qdstrm" > /dev/null
fi
"$NSYS" stats --report cuda_gpu_trace --format csv --output "$OUT/trace" "$OUT/prof.nsys-rep" > /dev/null
python3 scripts/gpu_timeline.py "$OUT/trace_cuda_gpu_trace.csv" --sublayers | tee "$OUT/timeline.txt" | tail -45
