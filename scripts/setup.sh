#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for moenum, idempotently and fast on reruns:
#   1. Debian packages (Eigen, GoogleTest, OpenMP) when missing,
#   2. a virtual environment .venv with the Python dependencies when requirements changed,
#   3. an incremental build + editable install of moenum (build tree in build/py).
set -euo pipefail
cd "$(dirname "$0")/.."

# Open MPI: the launcher and library of the mpi and nccl EP transports (mpi4py builds against it).
APT_PACKAGES=(libeigen3-dev libgtest-dev g++ python3-venv openmpi-bin libopenmpi-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# megatron-core needs Python >= 3.12: the venv uses $PYTHON, else python3.12 (pyenv's 3.12 where its
# shim has none selected), else python3 when that is new enough.
py_ok() { "$@" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }
find_python() {
  if [ -n "${PYTHON:-}" ]; then py_ok "$PYTHON" && echo "$PYTHON"; return; fi
  if py_ok python3.12; then command -v python3.12; return; fi
  if command -v pyenv >/dev/null; then
    local v; v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.[0-9]+)?$' | sort -V | tail -1)
    if [ -n "$v" ] && py_ok "$(pyenv root)/versions/$v/bin/python3"; then
      echo "$(pyenv root)/versions/$v/bin/python3"; return
    fi
  fi
  if py_ok python3; then command -v python3; fi
}
if [ -x .venv/bin/python ] && ! py_ok .venv/bin/python; then
  echo "setup: .venv is older than Python 3.12, recreating it"
  rm -rf .venv build/py
fi
if [ ! -x .venv/bin/python ]; then
  PY=$(find_python)
  if [ -z "$PY" ]; then
    echo "setup: moenum needs Python >= 3.12 (set PYTHON=, install python3.12 or pyenv 3.12)" >&2
    exit 3
  fi
  echo "setup: creating .venv with $PY ($("$PY" --version 2>&1))"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(cat requirements-dev.txt requirements-cutlass.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python dependencies"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  .venv/bin/python -m pip install -q --no-deps -r requirements-cutlass.txt
  echo "$want" > "$stamp"
fi

# The build tree persists in build/py, so an unchanged tree rebuilds nothing.
export PATH="$PWD/.venv/bin:/usr/local/cuda/bin:$PATH"
echo "setup: building moenum (MOENUM_CUDA=${MOENUM_CUDA:-AUTO})"
.venv/bin/python -m pip install -q --no-build-isolation --no-deps -e . \
  -Ccmake.define.MOENUM_BUILD_TESTS=ON -Ccmake.define.MOENUM_CUDA="${MOENUM_CUDA:-AUTO}" \
  -Cbuild.verbose=false
