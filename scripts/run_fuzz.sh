#!/usr/bin/env bash
# Builds the GGUF fuzz target (clang, libFuzzer + ASan + UBSan) in build-fuzz
# and runs it for a bounded time on a fresh copy of the seed corpus.
#
#   scripts/run_fuzz.sh [SECONDS]     (default 60)
#
# Idempotent: reconfigures only when build-fuzz has no CMake cache, rebuilds
# incrementally. Exits non-zero when the fuzzer finds a crash, leak, sanitizer
# report or timeout; the reproducer is left in fuzz/corpus-run/crashes/ (copy it into
# fuzz/corpus/gguf/ once fixed, so src/gguf/gguf_corpus_test.cc keeps it).
# Env: JOBS (build parallelism, default 2), FUZZ_EXTRA_ARGS (extra libFuzzer flags).
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"
seeds="$root/fuzz/corpus/gguf"
work="$root/fuzz/corpus-run/gguf"      # git-ignored working corpus
crashes="$root/fuzz/corpus-run/crashes"  # git-ignored

command -v clang++ >/dev/null || { echo "run_fuzz.sh: clang++ not found" >&2; exit 2; }

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DOMNIBUS_FUZZ=ON \
    "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
fi
cmake --build "$build" -j "${JOBS:-2}" --target gguf_fuzz

rm -rf "$work"
mkdir -p "$work" "$crashes"
cp "$seeds"/* "$work"/

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# -timeout: a single input slower than 10 s is a hang; -rss_limit_mb: an input
# that makes the reader allocate without bound is a bug too.
"$build/gguf_fuzz" "$work" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" ${FUZZ_EXTRA_ARGS:-}
