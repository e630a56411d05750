#!/usr/bin/env bash
# The nightly GPU gate: the one command that every scheduler runs (.github/workflows/nightly-gpu.yml
# on a self-hosted GPU runner, scripts/nightly.slurm under Slurm).
#
#   bash scripts/nightly.sh [OUT] [moenum nightly options...]     OUT defaults to results/nightly
#
# Builds incrementally with the CUDA backends (scripts/setup.sh), then runs the bundled nightly suite
# with the GPU required (no usable GPU: exit 3 up front; a GPU backend not_run: a failure), compares
# with this architecture's baseline baselines/<arch>.json and writes OUT/nightly.json and
# OUT/junit.xml. Exit codes are moenum nightly's. After a change that moves the errors on purpose:
#   bash scripts/nightly.sh results/nightly --update-baseline     (prints what changed; commit it)
# MOENUM_NIGHTLY_SKIP_SETUP=1 skips the build (an environment already set up).
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0  # no NVLink multicast in anything moenum launches (NCCL reads it at init)
OUT=${1:-results/nightly}
shift || true
if [ "${MOENUM_NIGHTLY_SKIP_SETUP:-0}" != 1 ]; then
  MOENUM_CUDA=${MOENUM_CUDA:-ON} bash scripts/setup.sh
fi
exec .venv/bin/moenum nightly --suite nightly --require gpu --baseline baselines \
  -o "$OUT" --junit "$OUT/junit.xml" -j "${MOENUM_NIGHTLY_JOBS:-1}" "$@"
