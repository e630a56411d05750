"""`index.json` in a campaign's output folder: every point ever run there, with its file, its verdict
(status: pending, or passed | failed | error | not_verified) and its backends' dispositions.

Written after each point, atomically, and merged under a file lock with what is already there: two
campaigns writing into one folder both keep their points, and a killed campaign still says what it
had finished. A point this campaign has not run yet (pending) does not hide another campaign's
finished entry for it.
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path

from .results_io import result_path, temporary_path, write_failure

PENDING = "pending"


@contextmanager
def _locked(path: Path):
    """An exclusive lock held on a sibling file (index.json itself is replaced, so not lockable)."""
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and isinstance(doc.get("points"), list) else {}


def _merge(theirs: list, ours: dict) -> list:
    merged = {p["name"]: p for p in theirs if isinstance(p, dict) and "name" in p}
    for name, entry in ours.items():
        if entry["status"] != PENDING or merged.get(name, {}).get("status", PENDING) == PENDING:
            merged[name] = entry
    return list(merged.values())


class CampaignIndex:
    def __init__(self, out, points, shard: tuple[int, int] | None):
        name = "index.json" if not shard else f"index.shard-{shard[0]}of{shard[1]}.json"
        self.path = Path(out) / name
        self.checks: dict = {}
        self.entries = {sc.name: {"name": sc.name, "file": result_path(out, sc.name).name,
                                  "status": PENDING, "dispositions": {},
                                  "parameters": dict(sc.sweep_point)}
                        for sc in points}

    def set(self, r, resumed: bool = False) -> None:
        self.entries[r.name].update(status=str(r.verdict), resumed=resumed,
                                    dispositions={b: str(d) for b, d in r.disposition.items()})

    def record(self, r, resumed: bool = False) -> None:
        self.set(r, resumed)
        self.write()

    def write(self, checks: dict | None = None) -> None:
        """Merge this campaign's entries (and invariance checks) into the file under the lock."""
        if checks is not None:
            self.checks = {name: {"passed": bool(ok), "detail": detail} for name, (ok, detail) in checks.items()}
        with _locked(self.path):
            old = _read(self.path)
            doc = {"points": _merge(old.get("points", []), self.entries)}
            all_checks = {**old.get("checks", {}), **self.checks}
            if all_checks:
                doc["checks"] = all_checks
            tmp = temporary_path(self.path)
            try:
                tmp.write_text(json.dumps(doc, indent=1, default=str))
                os.replace(tmp, self.path)
            except OSError as e:
                raise write_failure(self.path, e) from None
            finally:
                tmp.unlink(missing_ok=True)
