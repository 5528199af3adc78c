#!/usr/bin/env bash
# The main job on the bundled tiny DeepSeek-V4 model: install what is missing, build, compile a plan for
# the cpu target (dumping the IR after every pass), inspect it, and generate tokens greedily.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
MODEL=${1:-examples/tiny-v4}
OUT=build/demo
mkdir -p "$OUT"
echo "== compile $MODEL for the cpu target"
build/bin/smelt-compile "$MODEL" --target cpu -o "$OUT/tiny.smelt" --dump-ir-after-all "$OUT/ir"
echo "== IR dumps (one per pass) in $OUT/ir:"; ls "$OUT/ir"
echo "== inspect"
build/bin/smelt-run inspect "$OUT/tiny.smelt"
echo "== generate"
build/bin/smelt-run generate "$OUT/tiny.smelt" --prompt-ids 0,17,42,99,7,3,250,31 --max-new-tokens 24 --greedy
