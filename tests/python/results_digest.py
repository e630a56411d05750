"""A compact fingerprint of a results file: what must not change when the verifier moves.

Per backend: the disposition, and the SHA-256 of each output tensor's stored bytes (tensors
bitwise); every named check's verdict; the stage table's class counts per (backend, stage, expert);
the error table's figures per (backend, other, tensor, expert). `tests/data/bundled_digest.json.gz` was
made with this module from the code before the C++ verifier (`python tests/python/results_digest.py
OUT_JSON RESULTS_DIR...`); test_results_unchanged.py compares today's runs against it.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

import h5py
import numpy as np

OUTPUTS = ("y", "dx", "dw1", "dw2", "db1", "db2", "dprobs")
CLASS_COLUMNS = ("bitwise_equal", "scale_off_by_one", "tie_flip", "within_bound", "bound_violation")
FIGURES = ("n", "max_abs", "max_rel", "mean_abs", "rel_fro", "calc_diff", "max_ulp", "ulp_le0", "ulp_le1",
           "ulp_le2", "ulp_gt2", "bitwise_equal", "bound_violations")


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def digest(path) -> dict:
    out = {"backends": {}, "checks": {}, "stages": {}, "errors": {}}
    with h5py.File(path, "r") as f:
        for b, g in f["results"].items():
            entry = {"disposition": _text(g.attrs.get("disposition", ""))}
            for t in OUTPUTS:
                if t in g:
                    a = np.ascontiguousarray(g[t][()])
                    entry[t] = f"{a.dtype.str}{list(a.shape)}:" + hashlib.sha256(a.tobytes()).hexdigest()
            out["backends"][b] = entry
        if "checks" in f:
            for name, g in f["checks"].items():
                out["checks"][name] = bool(g.attrs["passed"])
        tables = f.get("tables")
        if tables is not None and "stages" in tables:
            for r in tables["stages"][()]:
                key = f"{_text(r['backend'])}/{_text(r['stage'])}/{int(r['expert'])}"
                out["stages"][key] = {c: int(r[c]) for c in CLASS_COLUMNS}
        if tables is not None and "errors" in tables:
            for r in tables["errors"][()]:
                key = f"{_text(r['backend'])}/{_text(r['other'])}/{_text(r['tensor'])}/{int(r['expert'])}"
                out["errors"][key] = {c: float(r[c]) for c in FIGURES}
    return out


def main(argv):
    target, folders = Path(argv[0]), argv[1:]
    result = {}
    for folder in folders:
        for p in sorted(Path(folder).glob("*.h5")):
            result[p.stem] = digest(p)
    with gzip.open(target, "wt") as f:
        json.dump(result, f, sort_keys=True, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1:])
