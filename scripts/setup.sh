#!/usr/bin/env bash
# Installs every dependency of ds4-offload, idempotently:
#  - Debian packages (compiler, CMake, libraries) when any is missing;
#  - the project's Python virtual environment (.venv) with gguf and numpy (oracle tests only) and
#    the openai client (server test).
# Usage: scripts/setup.sh            (as root, or with sudo available)
# Env:   DS4_SKIP_APT=1  skip the Debian step (for machines managed otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  build-essential g++ cmake ninja-build pkg-config ccache
  libgtest-dev libgmock-dev libbenchmark-dev
  liburing-dev libhwloc-dev libmimalloc-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libcpp-httplib-dev
  python3 python3-venv
  clang-14 libclang-rt-14-dev
)

if [ "${DS4_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "setup: Debian packages present"
  fi
fi

# Project virtual environment for the oracle tests (gguf-py, numpy; HF tokenizers for the tokenizer oracle).
PY=${DS4_PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import gguf, numpy, tokenizers" 2>/dev/null; then
  echo "setup: installing gguf, numpy and tokenizers into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check "numpy>=1.26" "gguf>=0.17" "tokenizers>=0.15"
fi
# The official OpenAI client for the `serve` end-to-end test (tests/server).
if ! .venv/bin/python -c "import openai" 2>/dev/null; then
  echo "setup: installing openai into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check "openai>=1.40"
fi
echo "setup: done"
