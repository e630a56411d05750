#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs every test: GoogleTest through ctest, then pytest.
# GPU tests skip with their reason when no GPU is present; a skip is never counted as a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ctest (GoogleTest) =="
ctest --test-dir build/py --output-on-failure -j "$(nproc)"
echo "== pytest =="
.venv/bin/python -m pytest -q "$@"
