#!/usr/bin/env bash
# CPU figures: the smoke run's wall time, what a fresh production-size buffer costs plain and advised
# for huge pages, and the reference GEMM's throughput next to Eigen's own fp64 GEMM on the same
# shapes, in one run. Run after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
cmake -S . -B build/bench -G Ninja -DMOENUM_CUDA=OFF -DMOENUM_PYTHON=OFF -DMOENUM_BENCH=ON >/dev/null
cmake --build build/bench --target bench_reference_gemm bench_first_touch >/dev/null
echo "== smoke run wall time (5 runs, whole process incl. Python start-up)"
out=$(mktemp -d)
for i in 1 2 3 4 5; do /usr/bin/time -f "%e" moenum run scenarios/smoke.yaml -o "$out" -q 2>&1 >/dev/null | tail -1; done
echo "== a fresh production-size buffer, plain and advised for huge pages"
./build/bench/bench_first_touch
echo "== reference GEMM vs Eigen fp64 GEMM"
./build/bench/bench_reference_gemm "$@"
