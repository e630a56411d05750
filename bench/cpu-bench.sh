#!/usr/bin/env bash
# CPU figures of issue 2: the smoke run's wall time and the reference GEMM's throughput next to
# Eigen's own fp64 GEMM on the same shapes, in one run. Run after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
cmake -S . -B build/bench -G Ninja -DMOENUM_CUDA=OFF -DMOENUM_PYTHON=OFF -DMOENUM_BENCH=ON >/dev/null
cmake --build build/bench --target bench_reference_gemm >/dev/null
echo "== smoke run wall time (5 runs, whole process incl. Python start-up)"
out=$(mktemp -d)
for i in 1 2 3 4 5; do /usr/bin/time -f "%e" moenum run scenarios/smoke.yaml -o "$out" -q 2>&1 >/dev/null | tail -1; done
echo "== reference GEMM vs Eigen fp64 GEMM"
./build/bench/bench_reference_gemm "$@"
