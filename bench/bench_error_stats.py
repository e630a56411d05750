"""Throughput of the error table (moenum._core.error_stats) of one moenum build, in elements per second.

    python bench/bench_error_stats.py build/py [BASE_BUILD/py] [--threads 1,2]

One fp32 pair of 2^26 elements (a standard normal reference, every seventh element one ulp away), the
table of the whole tensor, median of 5 after 2 warm-ups, per OMP thread count. With a second build
(the code before a change, built the same way) both are measured in the same run, each in its own
process, and the ratio new / base is printed.
"""
import argparse
import os
import subprocess
import sys

MEASURE = r"""
import sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import _core
rng = np.random.default_rng(0)
b = rng.standard_normal(1 << 26).astype(np.float32)
a = b.copy()
a[::7] = np.nextafter(a[::7], np.float32(np.inf))
for _ in range(2):
    _core.error_stats(a, "fp32", b, "fp32")
times = []
for _ in range(5):
    t = time.perf_counter()
    _core.error_stats(a, "fp32", b, "fp32")
    times.append(time.perf_counter() - t)
print(b.size / sorted(times)[2])
"""


def measure(build: str, threads: int) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", MEASURE, build], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build", help="folder holding the _core module")
    p.add_argument("base", nargs="?", help="a second build, the code before a change")
    p.add_argument("--threads", default="1,2")
    args = p.parse_args()
    print("| threads | build G elements/s | base G elements/s | build / base |\n|---|---|---|---|")
    for t in (int(x) for x in args.threads.split(",")):
        new = measure(args.build, t)
        base = measure(args.base, t) if args.base else float("nan")
        print(f"| {t} | {new / 1e9:.3f} | {base / 1e9:.3f} | {new / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
