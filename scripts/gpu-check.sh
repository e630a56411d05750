#!/usr/bin/env bash
# One command on a GPU machine: build the CUDA backends, run the GPU gtests (and compute-sanitizer
# memcheck and racecheck on a subset), the GPU scenarios through `moenum run` (the special-value and
# input-regime scenarios among them), and the GEMM bench with its
# torch._grouped_mm peer; logs go to $OUT (default build/gpu-check), a summary table is printed last.
#
#   scripts/gpu-check.sh [STAGE...]     stages: build tests sanitize scenarios verify tc external robust
#                                       nightly scale gpuref bench layer (default: all; the Python package is
#                                       built for scenarios, verify, tc, external, robust, nightly, scale, gpuref
#                                       and layer)
#                                       and, on request only, baseline: writes $OUT/baselines/<arch>.json
#                                       (the nightly suite on this GPU) to copy into baselines/ and commit,
#                                       profile: py-spy of the production points (bench/profile_parts.py),
#                                       gemm-ab: the bench stage's same-process GEMM A/B against torch alone,
#                                       gemm-diagnose: uniform-count ceilings and ncu counters of the GEMMs,
#                                       and the kernels the peers run (bench/gpu_gemm_peer_kernels.py),
#                                       gemm-kernels: the automatic GEMM's kernel times beside its configuration
#                                       forced (bench/gpu_gemm_kernel_times.py),
#                                       gemm-sustained: time per call of the GEMMs held at the power limit,
#                                       with the dense ceiling (bench/gpu_gemm_sustained.py),
#                                       gemm-l2: the strided batch's L2 priorities forced on the equal-count
#                                       cells, held at the power limit, then the gemm-diagnose stage on them,
#                                       gemm-cut: the strided batch on the fewest clusters for its waves beside
#                                       the batch on every CTA, held at the power limit,
#                                       and multigpu (nvidia-h200-x2): EP 2 under mpirun with transport nccl,
#                                       gpu.grouped and gpu.multistream, bf16 and mxfp8, every padding source,
#                                       bitwise against transport local, with timings
#
# Offline machines: packages the machine lacks can sit in .gpudeps/ (ignored by git):
#   nvidia_cutlass-*.whl   CUTLASS C++ headers (unpacked with pip --target, found via CUTLASS_INCLUDE_DIR)
#   libgtest-dev_*.deb     GoogleTest, when the system has none (unpacked under /tmp, never into /)
#   libeigen3-dev_*.deb    Eigen, likewise
#   mpi4py-*.whl           mpi4py for the multigpu stage, built on a machine with PyPI and Open MPI:
#                            python3 -m pip wheel --no-deps -w .gpudeps mpi4py
#   megatron_core-*.whl    Megatron-core for the external stage, fetched on a machine with PyPI:
#                            python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                              --implementation cp --platform manylinux_2_28_x86_64 -d .gpudeps megatron-core==0.19.2
# MOENUM_GPU_PREBUILT=DIR uses a build tree made on another machine with the same nvcc for sm_90a
# (cmake ... -DMOENUM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DMOENUM_PYTHON=ON -DMOENUM_GPU_BENCH=ON,
# carried to this one) instead of building here: device time is spent measuring, not compiling.
# The stages read only its five artifacts (_core*.so, libmoenum_gemm_capi.so, moenum_gpu_tests,
# moenum_gpu_bench, moenum_gpu_layer_bench): carry a folder of those, since the whole tree with its
# object files is over the device's 64 MiB carry limit.
# Exit code: 0 when every stage that ran passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0  # no NVLink multicast in anything moenum launches (NCCL reads it at init)
ROOT=$PWD
OUT=${OUT:-$ROOT/build/gpu-check}
mkdir -p "$OUT"
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(build tests sanitize scenarios verify tc external robust nightly scale gpuref bench layer)
want() { local s; for s in "${STAGES[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
export PATH="/usr/local/cuda/bin:$PATH"
JOBS=$(nproc)
BUILD=${MOENUM_GPU_PREBUILT:-build/gpu}
declare -A RESULT
SUMMARY=()
note() { RESULT[$1]=$2; SUMMARY+=("$(printf '%-10s %-8s %s' "$1" "$2" "$3")"); }

# ---- dependencies carried in .gpudeps ----------------------------------------------------------
CMAKE_EXTRA=()
DEPS=/tmp/moenum-gpudeps
if compgen -G ".gpudeps/nvidia_cutlass-*.whl" >/dev/null; then
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$DEPS/site" .gpudeps/nvidia_cutlass-*.whl \
    && CMAKE_EXTRA+=("-DCUTLASS_INCLUDE_DIR=$DEPS/site/cutlass_library/source/include")
fi
for deb in .gpudeps/libgtest-dev_*.deb .gpudeps/libeigen3-dev_*.deb; do
  [ -f "$deb" ] || continue
  case "$deb" in
    *gtest*) [ -f /usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake ] && continue ;;
    *eigen*) [ -f /usr/share/eigen3/cmake/Eigen3Config.cmake ] && continue ;;
  esac
  dpkg -x "$deb" "$DEPS/root" && UNPACKED=1
done
[ -n "${UNPACKED:-}" ] && CMAKE_EXTRA+=("-DCMAKE_PREFIX_PATH=$DEPS/root/usr;$DEPS/root/usr/lib/x86_64-linux-gnu/cmake/GTest;$DEPS/root/usr/share/eigen3/cmake")

# ---- build -------------------------------------------------------------------------------------
if want build && [ -n "${MOENUM_GPU_PREBUILT:-}" ]; then
  missing=$(for f in $BUILD/moenum_gpu_* $BUILD/_core*.so; do ldd "$f" | grep 'not found'; done | sort -u | tr '\n' ' ')
  [ -z "$missing" ] && note build ok "prebuilt in $BUILD" || note build FAILED "prebuilt $BUILD: $missing"
elif want build; then
  t0=$SECONDS
  if cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOENUM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
       -DMOENUM_BUILD_TESTS=ON -DMOENUM_PYTHON=OFF -DMOENUM_GPU_BENCH=ON "${CMAKE_EXTRA[@]}" >"$OUT/build.log" 2>&1 \
     && cmake --build $BUILD -j "$JOBS" >>"$OUT/build.log" 2>&1; then
    note build ok "$((SECONDS - t0)) s, $(grep -o 'CUTLASS grouped GEMM.*' "$OUT/build.log" | head -1)"
  else
    note build FAILED "see build.log: $(grep -m1 -E 'error|Error' "$OUT/build.log")"
  fi
fi

# ---- GPU gtests --------------------------------------------------------------------------------
if want tests && [ -x $BUILD/moenum_gpu_tests ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader >"$OUT/gpu_tests.log" 2>&1
  t0=$SECONDS
  timeout 300 $BUILD/moenum_gpu_tests --gtest_output=xml:"$OUT/gpu_tests.xml" >>"$OUT/gpu_tests.log" 2>&1
  rc=$?
  line=$(grep -E '^\[  (PASSED|FAILED) |tests? ran' "$OUT/gpu_tests.log" | tr '\n' ' ')
  skipped=$(grep -c '^\[  SKIPPED \]' "$OUT/gpu_tests.log")
  [ $rc -eq 0 ] && note gtests ok "$((SECONDS - t0)) s; $line; skipped lines $skipped" \
                || note gtests FAILED "rc $rc; $line; $(grep -m3 '^\[  FAILED  \]' "$OUT/gpu_tests.log" | tr '\n' ' ')"
fi

# ---- compute-sanitizer memcheck and racecheck on a subset ---------------------------------------
# memcheck: out-of-bounds and misaligned accesses, leaks of device memory; racecheck: shared-memory
# hazards (the MX quantizer's tile, the layer kernels' reductions). A subset: both slow kernels ~100x.
SANITIZE_FILTER='Backends/GpuLayer.*uniform*:Backends/GpuLayer.*empty_and_single*:Shapes/GpuMx.*96x160*:GpuMxSwizzle.*:GpuGraph.*:Backends/GpuMxfp8Layer.*module_ep2*'
if want sanitize && [ -x $BUILD/moenum_gpu_tests ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    t0=$SECONDS
    extra=(); [ $tool = memcheck ] && extra=(--leak-check full)
    timeout 300 compute-sanitizer --tool $tool "${extra[@]}" --error-exitcode 3 $BUILD/moenum_gpu_tests \
      --gtest_filter="$SANITIZE_FILTER" >"$OUT/sanitizer-$tool.log" 2>&1
    rc=$?
    summary=$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.log")
    [ $rc -eq 0 ] && note $tool ok "$((SECONDS - t0)) s; $summary" || note $tool FAILED "rc $rc; $summary"
  done
fi

# ---- the Python package: needed by the scenarios, verify, external, robust, nightly and scale stages
if want scenarios || want verify || want tc || want external || want robust || want nightly || want scale \
   || want baseline || want gpuref || want layer || want multigpu || want profile; then
  # The Python module built by CMake into the same tree (incremental: only the bindings compile),
  # then the package run from a temporary copy of bindings/moenum: no pip install needed offline.
  {
    [ -n "${MOENUM_GPU_PREBUILT:-}" ] || cmake -S . -B $BUILD -DMOENUM_PYTHON=ON -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" "${CMAKE_EXTRA[@]}" \
      && { [ -n "${MOENUM_GPU_PREBUILT:-}" ] || cmake --build $BUILD -j "$JOBS" --target _core; } \
      && rm -rf /tmp/moenum-py && mkdir -p /tmp/moenum-py && cp -r bindings/moenum /tmp/moenum-py/ \
      && cp $BUILD/_core*.so /tmp/moenum-py/moenum/ \
      && cp -r scenarios /tmp/moenum-py/moenum/scenarios
  } >"$OUT/package.log" 2>&1 || note package FAILED "see package.log: $(grep -m1 -E 'error|Error' "$OUT/package.log")"
fi

# ---- GPU scenarios through the Python package ----------------------------------------------------
if want scenarios && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  OMP_NUM_THREADS=2 PYTHONPATH=/tmp/moenum-py timeout 400 python3 -m moenum run -j 8 scenarios/smoke.yaml scenarios/padding.yaml \
    scenarios/ep.yaml scenarios/mxfp8.yaml scenarios/special.yaml scenarios/regimes.yaml -o /tmp/moenum-results \
    --backends golden,reference,cpu.eigen,gpu.grouped,gpu.multistream >"$OUT/scenarios.log" 2>&1
  rc=$?
  gpu_disp=$(grep -oE '^ +gpu\.[a-z]+ +(passed|failed|error|not_verified|not_run|not_supported)' "$OUT/scenarios.log" | awk '{print $1"="$2}' | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
  [ $rc -eq 0 ] && note scenarios ok "$((SECONDS - t0)) s; $(tail -1 "$OUT/scenarios.log"); GPU results: $gpu_disp" \
                || note scenarios FAILED "rc $rc; $(tail -1 "$OUT/scenarios.log")"
fi

# ---- verification engine on the GPU backends: stage checks and planted faults (pytest) -----------
if want verify && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  PYTHONPATH=/tmp/moenum-py timeout 400 python3 -m pytest -q -p no:cacheprovider -o addopts="" \
    tests/python/test_verify_inject.py tests/python/test_verify_stages.py -rs >"$OUT/verify.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && note verify ok "$((SECONDS - t0)) s; $(tail -1 "$OUT/verify.log")" \
                || note verify FAILED "rc $rc; $(tail -1 "$OUT/verify.log")"
fi

# ---- tc: gpu.grouped bit for bit against the hopper_mma model (numerics.md §6, scripts/tc_check.py) ---
# Every GEMM stage of every point of smoke (bf16), padding, ep and mxfp8, forward and backward, checked
# in full and bitwise, dw1/dw2 equal to the hopper_mma reference, and `gpu.grouped:h[3,5]+=1ulp` and
# `gpu.grouped:dw1[3,5,7]+=1ulp` detected (the latter undetectable under ideal). Points where the
# hardware disagrees with the model keep their results files (inputs and stages) in $OUT/tc/mismatch/.
if want tc && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  OMP_NUM_THREADS=8 PYTHONPATH=/tmp/moenum-py timeout 500 python3 scripts/tc_check.py --backend gpu.grouped \
    --out "$OUT/tc" >"$OUT/tc.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && note tc ok "$((SECONDS - t0)) s; $(tail -1 "$OUT/tc.log")" \
                || note tc FAILED "rc $rc; $(grep -m1 MISMATCH "$OUT/tc.log") $(tail -1 "$OUT/tc.log")"
fi

# ---- external backends on CUDA: torch.loop, torch.grouped_mm, megatron.sequential (bf16, pytest) -----
# megatron-core is pure Python on top of torch; carry its wheel in .gpudeps where the machine lacks it.
if want external && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  EXT_PATH=/tmp/moenum-py
  if ! python3 -c 'import megatron.core' 2>/dev/null && compgen -G ".gpudeps/megatron_core-*.whl" >/dev/null; then
    python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$DEPS/megatron" .gpudeps/megatron_core-*.whl \
      && EXT_PATH="$EXT_PATH:$DEPS/megatron"
  fi
  PYTHONPATH=$EXT_PATH timeout 500 python3 -m pytest -q -p no:cacheprovider -o addopts="" -rs \
    tests/python/test_external_backends.py -k "cuda or unfused or interval" >"$OUT/external.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && note external ok "$((SECONDS - t0)) s; $(tail -1 "$OUT/external.log")" \
                || note external FAILED "rc $rc; $(tail -1 "$OUT/external.log")"
fi

# ---- campaigns on a GPU machine: --resume reruns GPU backends that were not_run, GPU memory refusal ----
if want robust && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  PYTHONPATH=/tmp/moenum-py timeout 300 python3 -m pytest -q -p no:cacheprovider -o addopts="" -rs \
    tests/python/test_resume.py tests/python/test_resources.py -k "gpu or huge or 24_gb" >"$OUT/robust.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && note robust ok "$((SECONDS - t0)) s; $(tail -1 "$OUT/robust.log")" \
                || note robust FAILED "rc $rc; $(tail -1 "$OUT/robust.log")"
fi

# ---- the nightly gate with the GPU backends -------------------------------------------------------
# (the GPU required; against baselines/<arch>.json once a GPU baseline is committed there)
if want nightly && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  BASELINE=()
  compgen -G "baselines/sm_*.json" >/dev/null && BASELINE=(--baseline baselines)
  # As a nightly runner calls it (one point at a time, every core): the suite holds the production
  # points, whose oracles and checks use all cores; issue 11 wants it within 15 minutes (the bound here
  # leaves a device call room for the gpuref stage after it).
  PYTHONPATH=/tmp/moenum-py timeout 400 python3 -m moenum nightly -o /tmp/moenum-nightly \
    --require gpu "${BASELINE[@]}" --junit "$OUT/nightly-junit.xml" >"$OUT/nightly.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && note nightly ok "$((SECONDS - t0)) s; $(tail -1 "$OUT/nightly.log")" \
                || note nightly FAILED "rc $rc; $(tail -1 "$OUT/nightly.log")"
fi

# ---- a GPU baseline for the nightly gate (on request): $OUT/baselines/<arch>.json ------------------
if want baseline && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  OMP_NUM_THREADS=2 PYTHONPATH=/tmp/moenum-py timeout 300 python3 -m moenum nightly -j 8 -o /tmp/moenum-baseline \
    --require gpu --baseline "$OUT/baselines" --update-baseline >"$OUT/baseline.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && note baseline ok "$((SECONDS - t0)) s; wrote $(ls "$OUT"/baselines/*.json | tr '\n' ' ')(copy into baselines/)" \
                || note baseline FAILED "rc $rc; $(tail -1 "$OUT/baseline.log")"
fi

# ---- verification at production scale: a Qwen3-30B-A3B layer end to end (bench/verify_scale.py) -------
if want scale && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  # cProfile of the moenum process (its Python calls only: the C++ work shows as the calls that start it)
  PYTHONPATH=/tmp/moenum-py timeout 420 python3 bench/verify_scale.py \
    --moenum "python3 -m cProfile -o $OUT/scale.prof -m moenum" --timeout 400 \
    bench/scenarios/qwen3-30b-a3b.yaml >"$OUT/scale.md" 2>&1
  rc=$?
  python3 -c "import pstats; pstats.Stats('$OUT/scale.prof').sort_stats('cumulative').print_stats(45)" \
    >"$OUT/scale-profile.txt" 2>&1
  row=$(tail -1 "$OUT/scale.md")
  [ $rc -eq 0 ] && note scale ok "$((SECONDS - t0)) s; $row" || note scale FAILED "rc $rc; $row"
fi

# ---- golden and reference on the GPU (execution.device): gtests, every bundled scenario's oracles on
# cpu and gpu (reference bitwise, golden 1e-12), the Qwen3 point (auto = gpu here, then cpu) and the
# DeepSeek-V3 EP8 rank-0 mxfp8 point (gpu) timed end to end ----------------------------------------
if want gpuref && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  fails=()
  if [ -x $BUILD/moenum_gpu_tests ]; then
    timeout 300 $BUILD/moenum_gpu_tests --gtest_filter='*GpuOracle*' >"$OUT/gpuref-gtests.log" 2>&1 || fails+=(gtests)
  else
    fails+=("no $BUILD/moenum_gpu_tests (run the build stage)")
  fi
  PYTHONPATH=/tmp/moenum-py timeout 1200 python3 -m pytest -q -p no:cacheprovider -o addopts="" -rs \
    tests/python/test_execution_device.py >"$OUT/gpuref-pytest.log" 2>&1 || fails+=(pytest)
  PYTHONPATH=/tmp/moenum-py timeout 700 python3 bench/verify_scale.py --moenum "python3 -m moenum" --timeout 330 \
    --sweep output.results=full bench/scenarios/qwen3-30b-a3b.yaml >"$OUT/gpuref-scale.md" 2>&1
  # the host's transparent huge pages (core/src/huge_pages.cpp advises the large buffers)
  echo "THP enabled: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1); defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>&1)" \
    >>"$OUT/gpuref-scale.md"
  PYTHONPATH=/tmp/moenum-py timeout 400 python3 bench/verify_scale.py --moenum "python3 -m moenum" --timeout 380 \
    bench/scenarios/deepseek-v3-ep8.yaml 2>&1 | tail -n 1 >>"$OUT/gpuref-scale.md"
  [ "$(grep -c '| # OK:' "$OUT/gpuref-scale.md")" -eq 3 ] || fails+=("a timed point did not pass (gpuref-scale.md)")
  rows=$(grep -E '^\| (qwen3|output|deepseek)' "$OUT/gpuref-scale.md" | cut -d'|' -f2,3,6 | tr '\n' ';')
  [ ${#fails[@]} -eq 0 ] && note gpuref ok "$((SECONDS - t0)) s; $(tail -1 "$OUT/gpuref-pytest.log"); point|wall s|RSS: $rows" \
                         || note gpuref FAILED "${fails[*]}; $(tail -1 "$OUT/gpuref-pytest.log"); $rows"
fi

# ---- profile (on request): where the production points' time goes (py-spy --native, main thread) ----
# py-spy comes from .gpudeps (py_spy-*.whl) where the machine lacks it; bench/profile_parts.py sums the
# samples by part of the runner (backend runs, layout reruns, stage checks, error table, results file).
if want profile && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  SPY=$(command -v py-spy || true)
  if [ -z "$SPY" ] && compgen -G ".gpudeps/py_spy-*.whl" >/dev/null; then
    python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$DEPS/pyspy" .gpudeps/py_spy-*.whl \
      && SPY=$DEPS/pyspy/bin/py-spy
  fi
  rows=()
  status=ok
  for point in ${MOENUM_PROFILE_POINTS:-deepseek-v3-ep8 qwen3-30b-a3b}; do
    rm -rf /tmp/moenum-profile
    t1=$SECONDS
    raw=/tmp/moenum-profile-$point.raw  # large, and only the summary below is read: kept off $OUT
    PYTHONPATH=/tmp/moenum-py timeout 420 ${SPY:+$SPY record --native -r 25 -f raw -o "$raw" --} \
      python3 -m moenum run bench/scenarios/$point.yaml -o /tmp/moenum-profile >"$OUT/profile-$point.log" 2>&1 \
      || status=FAILED
    wall=$((SECONDS - t1))
    [ -s "$raw" ] && python3 bench/profile_parts.py "$raw" --seconds $wall --top 60 \
      >"$OUT/profile-$point.md" 2>&1
    rows+=("$point ${wall} s: $(grep '^# ' "$OUT/profile-$point.log" | tail -1)")
  done
  note profile $status "$((SECONDS - t0)) s; ${rows[*]}"
fi

# ---- multigpu (on request, two GPUs): real EP through NCCL, bitwise the simulated run (pytest) ------
if want multigpu && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  MPI_PATH=/tmp/moenum-py
  if ! python3 -c 'import mpi4py' 2>/dev/null && compgen -G ".gpudeps/mpi4py-*.whl" >/dev/null; then
    python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$DEPS/mpi4py" .gpudeps/mpi4py-*.whl \
      && MPI_PATH="$MPI_PATH:$DEPS/mpi4py"
  fi
  # Open MPI as root, for this stage only; the CPU transport's tests run here too.
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=$MPI_PATH timeout 580 python3 -m pytest -q -s \
    -p no:cacheprovider -o addopts="" tests/python/test_ep_transport.py -rs >"$OUT/multigpu.log" 2>&1
  rc=$?
  grep '^timing ' "$OUT/multigpu.log" >"$OUT/multigpu-timings.txt"
  summary="$(tail -1 "$OUT/multigpu.log"); $(wc -l <"$OUT/multigpu-timings.txt") timings in multigpu-timings.txt"
  [ $rc -eq 0 ] && note multigpu ok "$((SECONDS - t0)) s; $summary" || note multigpu FAILED "rc $rc; $summary"
fi

# The same-process GEMM A/B against torch (bench/gpu_gemm_ab_torch.py), for the bench and gemm-ab stages.
gemm_ab() { timeout 400 python3 bench/gpu_gemm_ab_torch.py $BUILD/libmoenum_gemm_capi.so >"$OUT/bench_ab.csv"; }

# ---- bench: our engines and torch._grouped_mm on the same shapes, same run ------------------------
if want bench && [ -x $BUILD/moenum_gpu_bench ]; then
  t0=$SECONDS
  # Three comparisons, each under one load: gpu.grouped timed alone beside torch timed alone (engine
  # "gpu.grouped.alone" against "torch._grouped_mm"), and every engine interleaved round by round
  # beside torch running as many calls per round (against "torch._grouped_mm.x10").
  { timeout 200 $BUILD/moenum_gpu_bench
    MOENUM_GEMM_BENCH_ENGINES=gpu.grouped timeout 200 $BUILD/moenum_gpu_bench | tail -n +2 | sed 's/,gpu\.grouped,/,gpu.grouped.alone,/'
    MOENUM_GEMM_BENCH_ENGINES=gpu.grouped.pingpong_m2 timeout 200 $BUILD/moenum_gpu_bench | tail -n +2 \
      | sed 's/,gpu\.grouped\.pingpong_m2,/,gpu.grouped.pingpong_m2.alone,/'
    timeout 200 python3 bench/gpu_peer_torch.py | tail -n +2
    timeout 300 python3 bench/gpu_peer_torch.py --calls-per-round 10 | tail -n +2; } >"$OUT/bench.csv" 2>"$OUT/bench.err"
  # and moenum's plan called from torch's process, the two round by round (bench/gpu_gemm_ab_torch.py)
  [ -f $BUILD/libmoenum_gemm_capi.so ] && gemm_ab 2>>"$OUT/bench.err"
  if [ -s "$OUT/bench.csv" ]; then
    note bench ok "$((SECONDS - t0)) s"
  else
    note bench FAILED "$(tail -1 "$OUT/bench.err")"
  fi
fi

# ---- gemm-ab (on request): the bench stage's same-process A/B alone, every forced tile beside torch --
if want gemm-ab && [ -f $BUILD/libmoenum_gemm_capi.so ]; then
  t0=$SECONDS
  # Clocks and power every 100 ms beside it: is the GPU held at its power cap while the GEMMs run?
  CLOCKS=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu
  nvidia-smi --query-gpu=$CLOCKS,clocks_event_reasons.sw_power_cap,clocks_event_reasons.sw_thermal_slowdown \
    --format=csv -lms 100 >"$OUT/gemm_ab_clocks.csv" 2>/dev/null &
  sampler=$!
  sleep 1
  if ! kill -0 $sampler 2>/dev/null; then  # older drivers name the reasons clocks_throttle_reasons
    nvidia-smi --query-gpu=$CLOCKS,clocks_throttle_reasons.sw_power_cap --format=csv -lms 100 \
      >"$OUT/gemm_ab_clocks.csv" 2>/dev/null &
    sampler=$!
  fi
  if gemm_ab 2>"$OUT/bench_ab.err"; then
    note gemm-ab ok "$((SECONDS - t0)) s"
  else
    note gemm-ab FAILED "$(tail -1 "$OUT/bench_ab.err")"
  fi
  kill $sampler 2>/dev/null
fi

# ---- gemm-kernels (on request): the automatic plan's kernels and gaps beside the forced plan's ----
if want gemm-kernels && [ -f $BUILD/libmoenum_gemm_capi.so ]; then
  t0=$SECONDS
  if timeout 200 python3 bench/gpu_gemm_kernel_times.py $BUILD/libmoenum_gemm_capi.so >"$OUT/gemm_kernels.csv" \
    2>"$OUT/gemm_kernels.err"; then
    note gemm-kern ok "$((SECONDS - t0)) s"
  else
    note gemm-kern FAILED "$(tail -1 "$OUT/gemm_kernels.err")"
  fi
fi

# ---- gemm-sustained (on request): time per call held at the power limit, every shape beside torch
# ---- and the dense ceiling, then every forced configuration on the uniform cells -------------------
if want gemm-sustained && [ -f $BUILD/libmoenum_gemm_capi.so ]; then
  t0=$SECONDS
  if timeout 300 python3 bench/gpu_gemm_sustained.py $BUILD/libmoenum_gemm_capi.so >"$OUT/gemm_sustained.csv" \
       2>"$OUT/gemm_sustained.err" \
     && timeout 330 python3 bench/gpu_gemm_sustained.py $BUILD/libmoenum_gemm_capi.so --sweep \
       >"$OUT/gemm_sustained_sweep.csv" 2>>"$OUT/gemm_sustained.err"; then
    note gemm-sust ok "$((SECONDS - t0)) s"
  else
    note gemm-sust FAILED "$(tail -1 "$OUT/gemm_sustained.err")"
  fi
fi

# ---- gemm-diagnose (on request): uniform counts, torch._grouped_mm beside batched and dense ceilings,
# ---- the kernels each peer picks, then the same kernels under ncu's counters ------------------------
NCU_METRICS=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed
if want gemm-diagnose && [ -f $BUILD/libmoenum_gemm_capi.so ]; then
  t0=$SECONDS
  timeout 200 python3 bench/gpu_gemm_diagnose.py $BUILD/libmoenum_gemm_capi.so >"$OUT/gemm_ceilings.csv" 2>"$OUT/gemm_diagnose.err"
  rc=$?
  timeout 120 python3 bench/gpu_gemm_peer_kernels.py >"$OUT/gemm_peer_kernels.csv" 2>>"$OUT/gemm_diagnose.err" || rc=1
  if command -v ncu >/dev/null; then
    timeout 300 ncu --clock-control none --profile-from-start off --csv --page details --print-units base \
      --section LaunchStats --metrics "$NCU_METRICS" python3 bench/gpu_gemm_diagnose.py $BUILD/libmoenum_gemm_capi.so --ncu \
      >"$OUT/gemm_ncu_raw.csv" 2>>"$OUT/gemm_diagnose.err"
    grep '^"' "$OUT/gemm_ncu_raw.csv" >"$OUT/gemm_ncu.csv"
    python3 bench/gpu_gemm_diagnose.py --table "$OUT/gemm_ncu.csv" >"$OUT/gemm_ncu_table.csv" 2>>"$OUT/gemm_diagnose.err" || rc=1
  fi
  [ $rc -eq 0 ] && note gemm-diag ok "$((SECONDS - t0)) s" || note gemm-diag FAILED "$(tail -1 "$OUT/gemm_diagnose.err")"
fi

# The forced engines $2 beside the automatic plan, held at the power limit, on the shapes $3, into
# $OUT/gemm_$1.csv (bench/gpu_gemm_sustained.py --sweep); for the A/B stages below.
sustained_ab() {
  MOENUM_GEMM_BENCH_ENGINES=$2 MOENUM_GEMM_SHAPES=$3 \
    timeout 200 python3 bench/gpu_gemm_sustained.py $BUILD/libmoenum_gemm_capi.so --sweep >"$OUT/gemm_$1.csv" 2>"$OUT/gemm_$1.err"
}

# ---- gemm-l2 (on request): the strided batch's L2 priorities against the rule, on the cells that run it
if want gemm-l2 && [ -f $BUILD/libmoenum_gemm_capi.so ]; then
  t0=$SECONDS
  sustained_ab l2 gpu.grouped.l2_weights_normal_rows_normal,gpu.grouped.l2_weights_first_rows_normal \
    qwen3_30b_fc1,qwen3_30b_fc2,qwen3.5_35b_fc1,qwen3.5_35b_fc2,gpt_oss_120b_fc1,gpt_oss_120b_fc2
  rc=$?
  OUT=$OUT/l2-diagnose MOENUM_GEMM_SHAPES=qwen3.5_35b_fc1,qwen3.5_35b_fc2 bash "$ROOT/scripts/gpu-check.sh" gemm-diagnose >>"$OUT/gemm_l2.err" 2>&1 || rc=1
  [ $rc -eq 0 ] && note gemm-l2 ok "$((SECONDS - t0)) s" || note gemm-l2 FAILED "$(tail -1 "$OUT/gemm_l2.err")"
fi

# ---- gemm-cut (on request): the strided batch's tiles on batch_clusters' clusters (the automatic
# ---- plan) against every CTA, on the uniform cells with a short last wave and one without (control)
if want gemm-cut && [ -f $BUILD/libmoenum_gemm_capi.so ]; then
  t0=$SECONDS
  sustained_ab cut gpu.grouped.batch_every_cta qwen3_30b_fc1,qwen3.5_35b_fc1,gpt_oss_120b_fc2,qwen3_30b_fc2 \
    && note gemm-cut ok "$((SECONDS - t0)) s" || note gemm-cut FAILED "$(tail -1 "$OUT/gemm_cut.err")"
fi

# ---- layer: gpu.grouped's whole layer (eager, graph replay) and the torch.grouped_mm adapter's, ----
# ---- same routing, same run; the MXFP8 quantize kernel beside a device-to-device copy -------------
if want layer && [ -x $BUILD/moenum_gpu_layer_bench ] && [ -d /tmp/moenum-py/moenum ]; then
  t0=$SECONDS
  rm -rf "$OUT/layer-plans" && mkdir -p "$OUT/layer-plans"
  { timeout 240 $BUILD/moenum_gpu_layer_bench layer "$OUT/layer-plans" \
      && PYTHONPATH=/tmp/moenum-py timeout 240 python3 bench/gpu_layer_peer_torch.py "$OUT/layer-plans" | tail -n +2
  } >"$OUT/layer.csv" 2>"$OUT/layer.err"
  rc=$?
  timeout 60 $BUILD/moenum_gpu_layer_bench quantize >"$OUT/quantize.csv" 2>>"$OUT/layer.err" || rc=1
  [ $rc -eq 0 ] && note layer ok "$((SECONDS - t0)) s" || note layer FAILED "rc $rc; $(tail -1 "$OUT/layer.err")"
fi

# ---- summary, last ----------------------------------------------------------------------------
if [ -s "$OUT/bench.csv" ]; then
  python3 - "$OUT/bench.csv" <<'PY' | tee "$OUT/bench_table.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
# alone against torch alone; interleaved engines against torch with as many calls per round
peer = {(r["shape"], r["dist"], r["engine"]): float(r["tflops"]) for r in rows if r["engine"].startswith("torch.")}
print(f"{'shape':<16}{'dist':<9}{'engine':<28}{'ms':>9}{'TFLOP/s':>9}{'vs torch':>9}{'peer':>20}")
for r in rows:
    peer_name = "torch._grouped_mm" if r["engine"].endswith(".alone") else "torch._grouped_mm.x10"
    p = None if r["engine"].startswith("torch.") else peer.get((r["shape"], r["dist"], peer_name))
    ratio = f"{float(r['tflops']) / p:.2f}" if p else "-"
    print(f"{r['shape']:<16}{r['dist']:<9}{r['engine']:<28}{float(r['ms']):>9.3f}{float(r['tflops']):>9.1f}{ratio:>9}"
          f"{peer_name if p else '':>20}")
PY
fi
if [ -s "$OUT/layer.csv" ]; then
  python3 - "$OUT/layer.csv" <<'PY' | tee "$OUT/layer_table.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
peer = {(r["shape"], r["dist"]): float(r["ms"]) for r in rows if r["engine"] == "torch.grouped_mm"}
print(f"{'layer fwd+bwd':<14}{'dist':<9}{'engine':<19}{'rows':>7}{'fwd ms':>9}{'ms':>9}{'TFLOP/s':>9}{'torch/this':>11}")
for r in rows:
    p = peer.get((r["shape"], r["dist"]))
    ratio = f"{p / float(r['ms']):.2f}" if p else "-"
    print(f"{r['shape']:<14}{r['dist']:<9}{r['engine']:<19}{r['rows']:>7}{float(r['fwd_ms']):>9.3f}{float(r['ms']):>9.3f}"
          f"{float(r['tflops']):>9.1f}{ratio:>11}")
PY
fi
[ -s "$OUT/quantize.csv" ] && { column -s, -t "$OUT/quantize.csv" 2>/dev/null || cat "$OUT/quantize.csv"; } | tee "$OUT/quantize_table.txt"
echo
echo "# gpu-check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
printf '%s\n' "${SUMMARY[@]}"
fail=0
for k in "${!RESULT[@]}"; do [ "${RESULT[$k]}" = ok ] || fail=1; done
[ $fail -eq 0 ] && echo "# gpu-check OK" || echo "# gpu-check FAILED"
exit $fail
