#!/usr/bin/env bash
# Makes this machine ready to build and test refgrad: Debian packages (apt-get,
# only those missing) and .venv with the pinned Python requirements (only when
# requirements.txt changed). When nothing is missing it takes well under 5 s.
# Each step prints one line; its full output goes to a log under build/logs/,
# printed when the step fails (tools/logged.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
logs=build/logs

# Debian packages: compilers and libraries for the build, graphviz for
# drawings, clang-14 with libFuzzer's runtime for the fuzzers.
APT_PACKAGES=(
  g++ pkg-config
  libxtensor-dev libxtensor-blas-dev libopenblas-dev
  libboost-dev doctest-dev nlohmann-json3-dev libcli11-dev libfmt-dev pybind11-dev
  graphviz clang-14 libclang-rt-14-dev libfuzzer-14-dev
)

missing=()
for package in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  tools/logged.sh $logs/apt-get.log "bootstrap: installing Debian packages: ${missing[*]}" \
    bash -c "$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq ${missing[*]}"
fi

# Python: .venv with the pinned requirements; torch==2.13.0 is the CPU wheel.
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  tools/logged.sh $logs/venv.log "bootstrap: creating .venv with $($PYTHON --version)" "$PYTHON" -m venv .venv
fi
stamp=.venv/.refgrad-requirements
wanted="$(sha256sum requirements.txt | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  tools/logged.sh $logs/pip.log "bootstrap: installing Python requirements into .venv" \
    .venv/bin/python -m pip install --disable-pip-version-check -r requirements.txt
  echo "$wanted" > "$stamp"
fi
