"""The HDF5 results file (interfaces.md): built in memory, written to a temporary name and renamed
when complete, so a crash leaves the old file or no file, never a truncated one that looks whole.
HDF5 copes badly with a disk that fills under it (errors in every destructor, then a crash), so it
never writes to the disk itself: the finished file image is written with plain file I/O, and a write
that fails (disk full, quota, file too large) removes its temporary file and is an EnvironmentFailure."""
from __future__ import annotations

import errno
import os
import shutil
import socket
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from .errors import EnvironmentFailure, ScenarioError
from .hdf5_probe import PROBE_SECONDS, finishes_reading
from .verify import COLUMNS

SCHEMA_VERSION = 1
# gzip (readable by every HDF5 tool) at its fastest level, with byte shuffling: bf16 values in float32
# and integer arrays shrink 2-3x; fp32 and fp64 values barely compress (measured 0.87 of their size at
# 30x the write time), so they are stored plainly.
# Above COMPRESS_MAX_ELEMENTS a dataset is stored plainly too: gzip runs on one core at about 100 MB/s,
# which made it a sixth of a production layer's verification (y and dx of every backend), for a
# saving of a few hundred MB in a file of tens of GB.
COMPRESSION = {"compression": "gzip", "compression_opts": 1, "shuffle": True}
PLAIN_DTYPES = ("fp32", "fp64")
COMPRESS_MAX_ELEMENTS = 1 << 22
STRING_COLUMNS = {"backend": 64, "other": 64, "tensor": 32, "disposition": 16}
INT_COLUMNS = {"expert", "n", "ulp_le0", "ulp_le1", "ulp_le2", "ulp_gt2", "bitwise_equal",
               "bound_violations", "nonfinite", "nonfinite_mismatch"}


def result_path(out_dir, scenario_name: str) -> Path:
    """Sweep points are named `name/key=value,...`: the slash becomes a double underscore."""
    return Path(out_dir) / (scenario_name.replace("/", "__") + ".h5")


# A file being written is `.<name>.tmp-<pid>@<host>`: hidden from globs, and a later run can tell a
# dead writer's leftovers (same host, no such process) from a live writer's file.
TEMPORARY_MARK = ".tmp-"


def temporary_path(path, pid: int | None = None) -> Path:
    """Where `path` is written (by process `pid`, default this one) before its atomic rename."""
    path = Path(path)
    return path.with_name(f".{path.name}{TEMPORARY_MARK}{os.getpid() if pid is None else pid}@{socket.gethostname()}")


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def remove_stale_temporaries(folder) -> list[Path]:
    """Remove the temporary files in `folder` whose writer, a process on this host, is gone."""
    removed = []
    here = socket.gethostname()
    for p in Path(folder).glob(f".*{TEMPORARY_MARK}*"):
        pid, _, host = p.name.rpartition(TEMPORARY_MARK)[2].partition("@")
        if pid.isdigit() and host == here and not _process_alive(int(pid)):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def write_failure(path, e: OSError) -> EnvironmentFailure:
    """A failed write of `path` as one line: what failed, where, and the OS's reason."""
    return EnvironmentFailure(f"cannot write {path}: {e.strerror or e}")


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # nothing to remove where nothing could be written


def _dataset(group, name, array, dtype_attr=None, compress=True):
    array = np.asarray(array)
    compressible = 1024 < array.size <= COMPRESS_MAX_ELEMENTS and dtype_attr not in PLAIN_DTYPES
    kwargs = COMPRESSION if compress and compressible else {}
    ds = group.create_dataset(name, data=array, **kwargs)
    if dtype_attr:
        ds.attrs["dtype"] = dtype_attr
    return ds


def _storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """fp64 for golden, float32 otherwise (bf16/fp32 values are exact in float32); no copy of an
    array already stored that way (the backends' arrays are)."""
    return np.asarray(values, dtype=np.float64 if dtype == "fp64" else np.float32)


def table_to_records(table: pd.DataFrame, fields: list | None = None) -> np.ndarray:
    """A DataFrame as an HDF5-ready structured array (strings as fixed-size bytes). Without `fields`
    the record layout follows the columns' dtypes (strings as wide as the longest value)."""
    if fields is None:
        fields = []
        for col in table.columns:
            kind = table[col].dtype.kind if len(table) else "O"
            if kind in "iub":
                fields.append((col, "<i8"))
            elif kind == "f":
                fields.append((col, "<f8"))
            else:
                fields.append((col, f"S{max([len(str(v)) for v in table[col]] + [16])}"))
    records = np.zeros(len(table), dtype=fields)
    for col, dt in fields:
        values = table[col].to_numpy() if len(table) else []
        records[col] = [str(v).encode() for v in values] if dt.startswith("S") else values
    return records


# The error table's record layout is fixed (interfaces.md columns), so that files compare and an
# empty table still has the documented dtypes.
ERROR_FIELDS = [(col, f"S{STRING_COLUMNS[col]}" if col in STRING_COLUMNS else "<i8" if col in INT_COLUMNS
                 else "<f8") for col in COLUMNS]


def errors_to_records(table: pd.DataFrame) -> np.ndarray:
    return table_to_records(table, ERROR_FIELDS)


def records_to_errors(records: np.ndarray) -> pd.DataFrame:
    table = pd.DataFrame({name: records[name] for name in records.dtype.names})
    for col in STRING_COLUMNS:
        if col in table:
            table[col] = table[col].map(lambda b: b.decode() if isinstance(b, bytes) else b)
    return table[[c for c in COLUMNS if c in table]]


# A file up to this size is built in memory and written with plain file I/O, so that a full disk is one
# OSError (h5py can crash writing into a full file system). A larger one would double the point's peak
# memory (a production layer's outputs are tens of GB): it is written by HDF5 directly, after checking
# that the file system has room for it.
IN_MEMORY_LIMIT = 256 << 20


def _write_large(tmp: Path, payload: int, contents: tuple) -> None:
    free = shutil.disk_usage(tmp.parent).free
    if free < payload + (64 << 20):
        raise OSError(errno.ENOSPC, f"no space left on device (the file needs about {payload / 2**30:.1f} GiB, "
                                    f"{free / 2**30:.1f} GiB free)")
    with h5py.File(tmp, "w") as f:
        _fill(f, *contents)
    with open(tmp, "rb") as out:
        os.fsync(out.fileno())


def write_results(path, attrs: dict, prepared, results: dict, table: pd.DataFrame, checks: dict,
                  write_inputs: bool, write_stages: bool, diffs: dict | None = None,
                  extra_tables: dict | None = None, write_outputs: bool = True) -> Path:
    """Write one scenario point's results file atomically; returns its path. write_outputs false
    (output.results: summary): the backends' groups keep their attributes, not their tensors."""
    path = Path(path)
    tmp = temporary_path(path)
    contents = (attrs, prepared, results, table, checks, write_inputs, write_stages, diffs, extra_tables,
                write_outputs)
    payload = _payload_bytes(prepared, results, write_inputs, write_stages, write_outputs)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if payload <= IN_MEMORY_LIMIT:
            image = _file_image(tmp.name, *contents)
            with open(tmp, "wb") as out:
                out.write(image)
                out.flush()
                os.fsync(out.fileno())  # a network file system may report a full quota only here
        else:
            _write_large(tmp, payload, contents)
        os.replace(tmp, path)
    except OSError as e:
        raise write_failure(path, e) from None
    finally:
        _remove_quietly(tmp)
    return path


def _fill(f, attrs, prepared, results, table, checks, write_inputs, write_stages, diffs, extra_tables,
          write_outputs) -> None:
    """Every group, dataset and attribute of one results file, into the open HDF5 file f."""
    for key, value in attrs.items():
        f.attrs[key] = value
    routing = f.create_group("routing")
    _dataset(routing, "topk_idx", prepared.topk_idx.astype(np.int32))
    _dataset(routing, "probs", prepared.probs.astype(np.float32))
    _dataset(routing, "tokens_per_expert", prepared.tokens_per_expert.astype(np.int64))
    plan = prepared.plan
    dispatch = f.create_group("dispatch")
    dispatch.attrs.update({"ep": plan["ep"], "padding": plan["padding"], "align": plan["align"],
                           "warnings": "\n".join(plan["warnings"])})
    for r, rank in enumerate(plan["ranks"]):
        g = dispatch.create_group(f"rank_{r}")
        _dataset(g, "row_token", rank["row_token"].astype(np.int64))
        _dataset(g, "row_expert", rank["row_expert"].astype(np.int32))
        _dataset(g, "tokens_per_expert", rank["tokens_per_expert"].astype(np.int64))
        g.attrs["fell_back_to_module"] = rank["fell_back_to_module"]
        g.attrs["simulated"] = rank["simulated"]
    if write_inputs:
        inputs = f.create_group("inputs")
        for name, values in prepared.inputs.items():
            _dataset(inputs, name, np.asarray(values, dtype=np.float32), "bf16")
    res = f.create_group("results")
    for backend, r in results.items():
        g = res.create_group(backend)
        g.attrs.update({"disposition": str(r["disposition"]), "reason": r.get("reason", ""),
                        "seconds": float(r.get("seconds", 0.0))})
        for key, value in r.get("attrs", {}).items():
            g.attrs[key] = value
        for name, (values, dtype) in (r.get("outputs", {}) if write_outputs else {}).items():
            _dataset(g, name, _storage(values, dtype), dtype)
        if write_stages and r.get("stages"):
            st = g.create_group("stages")
            for name, (values, dtype) in r["stages"].items():
                if dtype in ("e4m3", "e5m2", "e8m0", "uint8"):
                    ds = _dataset(st, name, np.asarray(values, dtype=np.uint8), dtype)
                    ds.attrs["format"] = dtype
                else:
                    _dataset(st, name, _storage(values, dtype), dtype)
    if diffs:
        dg = f.create_group("diffs")
        for pair, tensors in diffs.items():
            pg = dg.create_group(pair)
            for name, values in tensors.items():
                _dataset(pg, name, values.astype(np.float64))
    tables = f.create_group("tables")
    tables.create_dataset("errors", data=errors_to_records(table))
    for name, records in (extra_tables or {}).items():  # e.g. /tables/stages (moenum.verify)
        tables.create_dataset(name, data=records)
    cg = f.create_group("checks")
    for name, (passed, detail) in checks.items():
        c = cg.create_group(name)
        c.attrs["passed"] = bool(passed)
        c.attrs["detail"] = detail
    f.flush()


def _file_image(name, *contents) -> bytes:
    """The results file's bytes, built by HDF5 in memory (the core driver, nothing on disk)."""
    with h5py.File(name, "w", driver="core", backing_store=False) as f:
        _fill(f, *contents)
        return f.id.get_file_image()


def _payload_bytes(prepared, results, write_inputs, write_stages, write_outputs) -> int:
    """The array bytes a results file holds (its size, uncompressed)."""
    groups = [r.get("outputs", {}) for r in results.values()] if write_outputs else []
    if write_stages:
        groups += [r.get("stages", {}) for r in results.values()]
    n = sum(np.asarray(v).nbytes for g in groups for v, _ in g.values())
    if write_inputs:
        n += sum(np.asarray(v).size * 4 for v in prepared.inputs.values())
    return int(n)


def read_errors(path) -> pd.DataFrame:
    with _open(path) as f:
        return records_to_errors(f["tables/errors"][()])


def _open(path):
    path = Path(path)
    if path.is_file() and not finishes_reading(path):
        raise ScenarioError(f"not a readable moenum results file (HDF5 did not finish reading its metadata "
                            f"within {PROBE_SECONDS:.0f} s: a damaged file)", str(path))
    try:
        f = h5py.File(path, "r")
    except FileNotFoundError:
        raise ScenarioError("no such results file", str(path)) from None
    except OSError as e:
        raise ScenarioError(f"not a readable HDF5 results file ({e})", str(path)) from None
    try:  # a damaged file can open and then fail on any look-up (h5py KeyError, RuntimeError, ...)
        moenum_file = "schema_version" in f.attrs and "tables" in f
        version = int(f.attrs["schema_version"]) if moenum_file else 0
    except (KeyError, ValueError, TypeError, OSError, RuntimeError) as e:
        f.close()
        raise ScenarioError(f"not a readable moenum results file ({type(e).__name__}: {e})", str(path)) from None
    if not moenum_file:
        f.close()
        raise ScenarioError("not a moenum results file (no schema_version or /tables)", str(path))
    if version > SCHEMA_VERSION:
        f.close()
        raise ScenarioError(f"schema_version {version} is newer than this moenum reads ({SCHEMA_VERSION})",
                            str(path))
    return f


open_file = _open
