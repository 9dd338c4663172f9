#!/usr/bin/env bash
# Makes this machine ready to build and test refgrad: Debian packages (apt-get,
# only those missing) and .venv with the pinned Python requirements (only when
# requirements.txt changed). When nothing is missing it takes well under 5 s.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: compilers and libraries for the build, graphviz for
# drawings, clang-14 with libFuzzer's runtime for the fuzzers.
APT_PACKAGES=(
  g++ pkg-config
  libxtensor-dev libxtensor-blas-dev libopenblas-dev
  doctest-dev nlohmann-json3-dev libcli11-dev libfmt-dev pybind11-dev
  graphviz clang-14 libclang-rt-14-dev libfuzzer-14-dev
)

missing=()
for package in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# Python: .venv with the pinned requirements; torch==2.13.0 is the CPU wheel.
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.refgrad-requirements
wanted="$(sha256sum requirements.txt | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "bootstrap: installing Python requirements into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$wanted" > "$stamp"
fi
