"""Coverage-guided fuzzing of one target of targets.py with atheris (libFuzzer's options pass through).

    python tests/fuzz/fuzz.py scenario -max_total_time=30
    python tests/fuzz/fuzz.py results -max_total_time=30

Reads the corpus in tests/fuzz/corpus/<target>/ (never writes it: new inputs go to a temporary folder,
or to the first folder named after the options); a finding is written as crash-<sha1> into the current
folder (or -artifact_prefix=...). Copy it to tests/fuzz/regressions/<target>/ once fixed: the pytest
suite replays every file there.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

with atheris.instrument_imports(include=["moenum", "yaml", "targets"]):
    import targets


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in targets.TARGETS:
        sys.exit(f"usage: fuzz.py {{{'|'.join(targets.TARGETS)}}} [libFuzzer options] [corpus folders]")
    name, rest = sys.argv[1], sys.argv[2:]
    target = targets.TARGETS[name]
    folders = [a for a in rest if not a.startswith("-")]
    options = [a for a in rest if a.startswith("-")]
    if not any(o.startswith("-max_len=") for o in options):
        options.append(f"-max_len={targets.MAX_LEN[name]}")
    scratch = tempfile.mkdtemp(prefix=f"moenum-fuzz-{name}-")
    # libFuzzer adds new inputs to the first folder: a scratch one, so the repo's corpus stays as it is
    corpus = folders or [scratch, str(HERE / "corpus" / name)]
    atheris.Setup([sys.argv[0], *options, *corpus], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
