#!/usr/bin/env bash
# Runs every test omnibus has. Called by `make test` and by CI (.ci/run).
#   0. every hand-written C/C++ file as .clang-format says (scripts/check_format.sh),
#      every tracked Markdown file of a document's size (scripts/check_docs.sh);
#   1. release build (-Werror), all GoogleTest suites (unit + real-model tests);
#   2. ASan/UBSan build, all suites;
#   3. TSan build, the suites of the concurrent modules (kernels' thread pool, engine);
#   4. the GGUF fuzzer for a bounded time;
#   5. the Python suites (tests/python) against the release binary.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMNIBUS_MODELS_DIR=$PWD/models
# Each step says how long the run has taken so far (CI keeps an eye on it).
step() { printf '\n=== %s (at %d min %02d s) ===\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

step "format (.clang-format) and documents"
scripts/check_format.sh
scripts/check_docs.sh
step "release build"
scripts/build.sh release
step "release tests"
(cd build && ctest --output-on-failure --timeout 600 -j "$(nproc)" --output-junit ctest-junit.xml)

step "ASan/UBSan build (test binaries)"
OMNIBUS_CONFIGURE_ONLY=1 scripts/build.sh asan
# Ninja declares an executable as `build NAME NAME[1]_tests.cmake | ...: CXX_EXECUTABLE_LINKER...`.
mapfile -t asan_targets < <(grep -oE '^build [a-z0-9_]+_tests ' build-asan/build.ninja | sed 's/^build //; s/ $//')
scripts/build.sh asan --target "${asan_targets[@]}"
step "ASan/UBSan tests"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
   ctest --output-on-failure --timeout 600 -j "$(nproc)" -E "${OMNIBUS_ASAN_EXCLUDE:-^$}")

step "TSan build (concurrent modules)"
# kv_events_tests: the publisher's queue and sender thread. libzmq is not
# built with TSan: scripts/tsan.supp silences reports from inside it only.
# grammar_tests: TokenMasker's mask cache shared by sampling threads.
# kv_transfer_tests: the agent's accept, connection, release and UCX progress
# threads. UCX's memory hooks (UCM) patch madvise/mmap process-wide when libucs
# loads; the patched madvise runs in exiting threads after TSan tore them down
# (SIGSEGV). omnibus never relies on those hooks (one region registered for
# the agent's life), so the TSan run turns them off; UCM reads UCX_MEM_* before
# main, so this cannot be done from the code.
OMNIBUS_CONFIGURE_ONLY=1 scripts/build.sh tsan
tsan_targets=()
for t in engine_tests kernels_tests grammar_tests kv_transfer_tests kv_events_tests server_tests; do
  grep -qE "^build $t " build-tsan/build.ninja && tsan_targets+=("$t")
done
scripts/build.sh tsan --target "${tsan_targets[@]}"
step "TSan tests"
# Two suites at a time (each is mostly one thread at a time under TSan), the
# longest first; a suite's output is shown whole when it fails, else its summary.
tsan_run() {
  local log="build-tsan/$1.log"
  if UCX_MEM_MMAP_HOOK_MODE=none TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/scripts/tsan.supp" \
       "build-tsan/$1" --gtest_brief=1 >"$log" 2>&1; then
    echo "$1: $(grep -E '^\[==========\] .* ran' "$log")"
  else
    cat "$log"; echo "$1: FAILED"; return 1
  fi
}
export -f tsan_run
printf '%s\n' "${tsan_targets[@]}" | xargs -P 2 -I{} bash -c 'tsan_run {}'

if [ -x scripts/run_fuzz.sh ]; then
  step "GGUF fuzzer (${OMNIBUS_FUZZ_SECONDS:-60} s)"
  scripts/run_fuzz.sh "${OMNIBUS_FUZZ_SECONDS:-60}"
fi

if compgen -G "tests/python/test_*.py" >/dev/null; then
  step "Python tests"
  OMNIBUS_BIN=$PWD/build/omnibus .venv/bin/python -m pytest -q -rs --durations=15 \
    --junitxml=build/pytest-junit.xml tests/python
fi
step "skipped tests against tests/skips_allowed.txt"
.venv/bin/python scripts/check_skips.py build/ctest-junit.xml build/pytest-junit.xml
step "all tests passed"
