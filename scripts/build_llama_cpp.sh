#!/usr/bin/env bash
# Builds the reference llama.cpp that omnibus is compared against, idempotently.
# It is for comparison only (golden data, perplexity, benchmarks): omnibus never
# links it, and nothing of it is committed.
#
# The reference is the llama.cpp vendored in PyPI's llama-cpp-python sdist,
# pinned below, built as shared libraries with the native CPU flags into
#   .ref/llama_cpp_python-<version>/   the extracted sdist (its Python package
#                                      drives golden-data generation)
#   .ref/build/bin/                    llama-bench, llama-perplexity, ...,
#                                      libllama.so and libggml*.so
# (.ref/ is git-ignored). Each step is skipped when its output exists.
#
# OMNIBUS_LLAMA_CPP_DIR=/path/to/build  use an existing build of the same sdist
#   (e.g. /work/ref/build) instead: nothing is downloaded or built, the script
#   only checks the binaries and prints the paths.
# JOBS=N  build parallelism (default 2).
# --no-amx  build the same sources without AMX into .ref/build-noamx instead
#   (AVX-512 / VNNI / BF16 / AVX-VNNI kept): on a Sapphire Rapids class Xeon the
#   native build's AMX path segfaults when it repacks weights, so llama.cpp's
#   batched, server and decode figures there come from this build
#   (docs/performance.md, round (c); the bench scripts take it as
#   OMNIBUS_LLAMA_CPP_DIR=.ref/build-noamx).
#
# Prints, last, shell assignments the other tools read:
#   LLAMA_CPP_BIN=...        directory with the binaries and libllama.so
#   LLAMA_CPP_PYTHONPATH=... the sdist directory (for `import llama_cpp`)
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.3.36
# The native build, or with --no-amx the build whose dir and logs end in -noamx.
suffix=
cpu_flags=(-DGGML_NATIVE=ON)
if [ "${1:-}" = "--no-amx" ]; then
  suffix=-noamx
  cpu_flags=(-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
             -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF)
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/build_llama_cpp.sh [--no-amx]" >&2
  exit 2
fi
targets=(llama-bench llama-perplexity llama-batched-bench llama-server llama-tokenize
         llama-completion llama-quantize llama-embedding)

report() {  # report BUILD_DIR SDIST_DIR
  local bin=$1/bin
  local missing=()
  for t in "${targets[@]}" libllama.so; do [ -e "$bin/$t" ] || missing+=("$t"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "build_llama_cpp: missing in $bin: ${missing[*]}" >&2
    exit 1
  fi
  echo "build_llama_cpp: binaries and libllama.so in $bin"
  echo "LLAMA_CPP_BIN=$bin"
  echo "LLAMA_CPP_PYTHONPATH=$2"
}

if [ -n "${OMNIBUS_LLAMA_CPP_DIR:-}" ]; then
  build=$(cd "$OMNIBUS_LLAMA_CPP_DIR" && pwd)
  # The sdist is the build's CMake source dir minus vendor/llama.cpp.
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
  report "$build" "${src%/vendor/llama.cpp}"
  exit 0
fi

ref=.ref
sdist_dir=$ref/llama_cpp_python-$version
build=$ref/build$suffix
mkdir -p "$ref"

# 1. Download the sdist from PyPI (source only, no dependencies).
find_tarball() { ls "$ref"/llama[_-]cpp[_-]python-"$version".tar.gz 2>/dev/null | head -n 1 || true; }
tarball=$(find_tarball)
if [ -z "$tarball" ]; then
  echo "build_llama_cpp: downloading llama-cpp-python==$version (sdist)"
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$ref" \
    "llama-cpp-python==$version"
  tarball=$(find_tarball)
  [ -n "$tarball" ] || { echo "build_llama_cpp: sdist not found in $ref" >&2; exit 1; }
fi

# 2. Extract it.
if [ ! -f "$sdist_dir/vendor/llama.cpp/CMakeLists.txt" ]; then
  echo "build_llama_cpp: extracting $tarball"
  tar -xzf "$tarball" -C "$ref"
  # Older sdists extract to llama-cpp-python-<version>.
  [ -d "$sdist_dir" ] || mv "$ref/llama-cpp-python-$version" "$sdist_dir"
fi

# 3. Configure (once).
if [ ! -f "$build/build.ninja" ]; then
  echo "build_llama_cpp: configuring $build"
  cmake -S "$sdist_dir/vendor/llama.cpp" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON "${cpu_flags[@]}" \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_HTML=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF >"$ref/cmake$suffix.log" 2>&1 ||
    { tail -n 30 "$ref/cmake$suffix.log" >&2; exit 1; }
fi

# 4. Build the targets (ninja itself skips what is up to date).
echo "build_llama_cpp: building ${targets[*]} (log: $ref/build$suffix.log)"
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}" >"$ref/build$suffix.log" 2>&1 ||
  { tail -n 30 "$ref/build$suffix.log" >&2; exit 1; }

report "$(cd "$build" && pwd)" "$(cd "$sdist_dir" && pwd)"
