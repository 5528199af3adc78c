#!/usr/bin/env bash
# On the GPU machine: transformers' DeepSeek-V4 (eager) and smelt's plan of the same V4 slice, one after the
# other in the same run on the same GPU, and one table of both (docs/performance.md "Side by side with
# transformers"): decode ms/step at batch 1, the ratio, both prefill numbers, bytes per step against the floor.
#   (a) scripts/v4_side_by_side.py CONFIG (torch + transformers 5.17: random bf16 weights built on the GPU)
#   (b) smelt-run bench PLAN --synthetic-weights 1 --prompt-len P --steps S --format json
# A failing transformers run (e.g. a piece of V4 that does not run in eager on this config) prints its
# exception and the table carries smelt's numbers alone.
# usage: scripts/gpu_side_by_side.sh PLAN CONFIG [PROMPT_LEN=1024] [STEPS=16]
#   PLAN: smelt-compile CKPT --target h200 of the checkpoint whose config.json is CONFIG (scripts/gpu_plans.sh
#   builds bench_v4flash_slice3.smelt and carries its config as models/v4flash_slice3/config.json)
#   env: SMELT_RUN (default build-gpu/bin/smelt-run), OUT (results folder, default build-gpu/side_by_side),
#        PYTHON (default python3), EXPERTS (transformers experts implementations, default eager,grouped_mm)
set -uo pipefail  # no -e: smelt's run goes on whatever transformers does
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: scripts/gpu_side_by_side.sh PLAN CONFIG [PROMPT_LEN=1024] [STEPS=16]" >&2
  exit 2
fi
PLAN=$1 CONFIG=$2 P=${3:-1024} S=${4:-16}
SMELT_RUN=${SMELT_RUN:-build-gpu/bin/smelt-run}
OUT=${OUT:-build-gpu/side_by_side}
PY=${PYTHON:-python3}
EXPERTS=${EXPERTS:-eager,grouped_mm}
for f in "$PLAN" "$CONFIG"; do [ -f "$f" ] || { echo "error: $f not found" >&2; exit 1; }; done
[ -x "$SMELT_RUN" ] || { echo "error: $SMELT_RUN not built (TARGETS=smelt-run scripts/gpu_build.sh)" >&2; exit 1; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # nothing to fetch: the model is built from the config
mkdir -p "$OUT"
rm -f "$OUT/transformers.json" "$OUT/smelt.json"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader || true
"$SMELT_RUN" inspect "$PLAN" > "$OUT/inspect.txt" 2>&1 || true

echo "== (a) transformers eager: $CONFIG, prompt $P, $S decode steps, experts $EXPERTS"
"$PY" scripts/v4_side_by_side.py "$CONFIG" --prompt-len "$P" --steps "$S" --experts "$EXPERTS" \
  --out "$OUT/transformers.json" > /dev/null 2> "$OUT/transformers.log"
rc=$?
if [ $rc != 0 ]; then
  echo "transformers failed (exit $rc); the end of $OUT/transformers.log:"
  tail -25 "$OUT/transformers.log"
fi
grep -v "it/s\]$" "$OUT/transformers.log" | grep -i "warn" | sort -u | head -5 || true

echo "== (b) smelt: $PLAN, prompt $P, $S decode steps"
"$SMELT_RUN" bench "$PLAN" --synthetic-weights 1 --prompt-len "$P" --steps "$S" --format json \
  > "$OUT/smelt.json" 2> "$OUT/smelt.log"
src=$?
if [ $src != 0 ]; then
  echo "smelt-run bench failed (exit $src); the end of $OUT/smelt.log:"
  tail -25 "$OUT/smelt.log"
fi

echo "== side by side"
"$PY" - "$OUT/transformers.json" "$OUT/smelt.json" "$CONFIG" "$OUT/inspect.txt" "$OUT/side_by_side.json" <<'PY'
import datetime, json, sys

tj, sj, config_path, inspect_path, out_path = sys.argv[1:6]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": f"no report ({type(e).__name__}: {e})"}


t, s = load(tj), load(sj)
c = load(config_path)
kinds = {0: "sliding", 4: "CSA"}
layers = c.get("num_hidden_layers", 0)
schedule = ", ".join(kinds.get(r, f"HCA {r}") for r in c.get("compress_ratios", [])[:layers])

# The plan must be the config's model: compare what `smelt-run inspect` prints of its config.
plan_cfg = {}
try:
    for line in open(inspect_path):
        if line.startswith("  ") and ":" in line and not line.startswith("   "):
            k, v = line.strip().split(":", 1)
            plan_cfg[k] = v.strip()
except OSError:
    pass
for k in ("num_hidden_layers", "hidden_size", "n_routed_experts", "moe_intermediate_size", "compress_ratios"):
    want = json.dumps(c.get(k) if k != "compress_ratios" else c.get(k, [])[:layers], separators=(",", ":"))
    if k in plan_cfg and plan_cfg[k] != want:
        print(f"WARNING: the plan's {k} is {plan_cfg[k]} but {config_path} says {want}: not the same model")

device = s.get("device") or t.get("device") or "?"
print(f"{datetime.date.today()} on {device}, one GPU, one run: {config_path} ({layers} layers: {schedule}), "
      f"prompt {t.get('prompt_tokens', '?')} tokens, decode at batch 1")
print("Weights: random in both, with the same names, shapes and dtypes but different values (transformers' own "
      "init, smelt's --synthetic-weights); at batch 1 the time depends on the values only through the MoE routing, "
      "random in both.")
if "transformers" in t:
    print(f"transformers {t['transformers']}, torch {t.get('torch')}, attention {t.get('attn_implementation')}; "
          f"{t.get('fp32_modules', '')}")
if "error" in t:
    print(f"transformers: {t['error']}")

rows = []
for r in t.get("runs", []):
    name = f"transformers eager (experts {r['experts_implementation']})"
    if not r.get("ok"):
        print(f"{name}: failed: {r.get('error')}")
        continue
    rows.append(dict(name=name, ms=r["decode_ms_median"], p10=r["decode_ms_p10"], p90=r["decode_ms_p90"],
                     prefill_ms=r["prefill_ms"], prefill_tps=r["prefill_tokens_per_s"],
                     mb=t["decode_bytes_per_step_est"] / 1e6, floor=r["ratio_to_floor"],
                     copy=t.get("copy_bandwidth_gbps")))
smelt = None
if "decode_ms_median" in s:
    smelt = dict(name="smelt (CUDA graph)", ms=s["decode_ms_median"], p10=s["decode_ms_p10"], p90=s["decode_ms_p90"],
                 prefill_ms=s["prefill_ms"], prefill_tps=s["prefill_tokens_per_s"],
                 mb=s["bytes_per_step"]["total"] / 1e6, floor=s["ratio_to_copy_bandwidth"],
                 copy=s.get("copy_bandwidth_gbps"))
    rows.append(smelt)
else:
    print(f"smelt: {s.get('error', 'no decode numbers in the report')}")

print()
print("| engine | decode ms/step (median) | p10 | p90 | prefill ms | prefill tokens/s | bytes/step MB | ratio to floor |"
      " copy GB/s |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['name']} | {r['ms']:.3f} | {r['p10']:.3f} | {r['p90']:.3f} | {r['prefill_ms']:.1f} | "
          f"{r['prefill_tps']:.1f} | {r['mb']:.1f} | {r['floor']:.3f} | {r['copy']:.0f} |")
print()
summary = {"date": str(datetime.date.today()), "device": device, "config": config_path, "rows": rows}
if smelt:
    for r in rows:
        if r is smelt:
            continue
        dec, pre = r["ms"] / smelt["ms"], r["prefill_ms"] / smelt["prefill_ms"]
        summary.setdefault("ratios", {})[r["name"]] = {"decode": dec, "prefill": pre}
        print(f"ratio {r['name']} / smelt (time over time): decode step {dec:.2f}x "
              f"(smelt {'faster' if dec > 1 else 'slower'}), prefill {pre:.2f}x (smelt {'faster' if pre > 1 else 'slower'})")
print("bytes/step: transformers row = its estimate (every non-expert weight, one embedding row, top-k experts "
      "per layer); smelt row = the bench's count (routing counted, states included).")
with open(out_path, "w") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")
PY
echo "(reports: $OUT/transformers.json, $OUT/smelt.json, $OUT/side_by_side.json; logs beside them)"
[ $src = 0 ]
