#!/usr/bin/env bash
# Sets up (scripts/setup.sh) plus the external backends' torch and megatron-core, then runs every
# test: GoogleTest through ctest, then pytest.
# GPU tests skip with their reason when no GPU is present; a skip is never counted as a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0  # no NVLink multicast in anything moenum launches (NCCL reads it at init)
bash scripts/setup.sh
# The external backends' tests need torch and megatron-core, the tensor-core model's tests mmasim
# (large: installed here, not by setup.sh, and only when the requirements changed; pip's cache keeps
# a reinstall fast).
stamp=.venv/.requirements-torch.sha
want=$(cat requirements-torch.txt requirements-mmasim.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "test: installing torch, megatron-core and mmasim (requirements-torch.txt, requirements-mmasim.txt)"
  .venv/bin/python -m pip install -q -r requirements-torch.txt -r requirements-mmasim.txt
  echo "$want" > "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"
echo "== ctest (GoogleTest) =="
ctest --test-dir build/py --output-on-failure -j "$(nproc)"

# ---- sanitizers: the GoogleTests under AddressSanitizer + UndefinedBehaviorSanitizer -----------
# A separate build tree (build/asan: CUDA and Python off, MOENUM_SANITIZE=ON); any report fails.
# MOENUM_SKIP_SANITIZE=1 skips it (a quick local run), never in CI.
if [ "${MOENUM_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== ctest under ASan+UBSan (build/asan) =="
  t0=$SECONDS
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOENUM_SANITIZE=ON -DMOENUM_BUILD_TESTS=ON \
    -DMOENUM_PYTHON=OFF -DMOENUM_CUDA=OFF >/dev/null
  cmake --build build/asan
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build/asan --output-on-failure -j "$(nproc)"
  echo "asan+ubsan: $((SECONDS - t0)) s"
fi
# ---- end of sanitizers --------------------------------------------------------------------------

echo "== pytest =="
.venv/bin/python -m pytest -q "$@"

# ---- fuzzing: the scenario loader and the results reader under atheris, bounded --------------
# A fixed number of inputs per target (MOENUM_FUZZ_RUNS, default 20000 for the loader, 6000 for the
# reader), at most MOENUM_FUZZ_SECONDS (default 120) each; MOENUM_FUZZ_SEED (default 1) keeps the
# inputs the same from run to run. Findings land in build/fuzz/ and fail the step. A target that hangs
# in native code, where no Python timeout reaches, is killed and fails the step (moenum's reader
# refuses files that hang HDF5: moenum/hdf5_probe.py).
if [ "${MOENUM_FUZZ_SECONDS:-120}" != 0 ]; then
  echo "== fuzz (atheris, a fixed count of inputs per target, seed ${MOENUM_FUZZ_SEED:-1}) =="
  .venv/bin/python -c "import atheris" 2>/dev/null || .venv/bin/python -m pip install -q -r requirements-fuzz.txt
  mkdir -p build/fuzz
  for spec in scenario:20000 results:6000; do
    target=${spec%%:*} runs=${MOENUM_FUZZ_RUNS:-${spec#*:}} seconds=${MOENUM_FUZZ_SECONDS:-120}
    rc=0
    timeout -s KILL $((seconds + 120)) .venv/bin/python tests/fuzz/fuzz.py "$target" -runs="$runs" \
      -max_total_time="$seconds" -seed="${MOENUM_FUZZ_SEED:-1}" -artifact_prefix=build/fuzz/"$target"- \
      -print_final_stats=1 2>build/fuzz/"$target".log || rc=$?
    if [ $rc -eq 137 ]; then
      echo "fuzz: $target hung in native code for $((seconds + 120)) s (killed); its last inputs: build/fuzz/$target.log"
      exit 1
    elif [ $rc -ne 0 ]; then
      tail -40 build/fuzz/"$target".log; echo "fuzz: $target found a failure (build/fuzz/)"; exit 1
    fi
    grep -E '^stat::number_of_executed_units' build/fuzz/"$target".log | sed "s/^/fuzz $target: /"
  done
fi
# ---- end of fuzzing ------------------------------------------------------------------------------
