#!/usr/bin/env bash
# Installs what is missing, builds, runs every CPU test (GPU-labelled tests are skipped), then builds the
# libFuzzer targets with clang and runs each briefly on its seed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build -LE gpu --output-on-failure -j "${SMELT_JOBS:-$(nproc)}"
bash scripts/fuzz.sh "${SMELT_FUZZ_SECONDS:-20}"
