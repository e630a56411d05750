"""Markdown table of a bench/gpu_gemm_ab_torch.py CSV: each engine's ratio over torch, one call / five.

python3 bench/gemm_ab_table.py bench_ab.csv
"""
import csv
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = list(csv.DictReader(open(sys.argv[1])))
    engines = list(dict.fromkeys(r["engine"] for r in rows if r["engine"] != "torch._grouped_mm"))
    cell = {(r["shape"], r["dist"], r["calls"], r["engine"]): r for r in rows}
    print("| shape | dist | torch TFLOP/s (1 / 5) | " + " | ".join(e.removeprefix("gpu.grouped.") for e in engines) + " |")
    print("|---" * (3 + len(engines)) + "|")
    for shape, dist in dict.fromkeys((r["shape"], r["dist"]) for r in rows):
        def both(engine, field):
            return " / ".join(cell[(shape, dist, c, engine)][field] if (shape, dist, c, engine) in cell else "-"
                              for c in ("1", "5"))
        ratios = [both(e, "vs_torch") for e in engines]
        print(f"| {shape} | {dist} | {both('torch._grouped_mm', 'tflops')} | " + " | ".join(ratios) + " |")
    print(f"\nelements differing from torch, all checks: {sum(int(r['differing']) for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
