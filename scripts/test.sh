#!/usr/bin/env bash
# Sets up (scripts/setup.sh) plus the external backends' torch and megatron-core, then runs every
# test: GoogleTest through ctest, then pytest.
# GPU tests skip with their reason when no GPU is present; a skip is never counted as a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The external backends' tests need torch and megatron-core (large: installed here, not by setup.sh,
# and only when requirements-torch.txt changed; pip's cache keeps a reinstall fast).
stamp=.venv/.requirements-torch.sha
want=$(sha256sum requirements-torch.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "test: installing torch and megatron-core (requirements-torch.txt)"
  .venv/bin/python -m pip install -q -r requirements-torch.txt
  echo "$want" > "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"
echo "== ctest (GoogleTest) =="
ctest --test-dir build/py --output-on-failure -j "$(nproc)"
echo "== pytest =="
.venv/bin/python -m pytest -q "$@"
