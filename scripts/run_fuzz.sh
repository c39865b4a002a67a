#!/usr/bin/env bash
# Builds every fuzz target fuzz/<stem>_fuzz.cc (clang, libFuzzer + ASan +
# UBSan) in build-fuzz and runs each for a bounded time on a fresh copy of its
# seed corpus fuzz/corpus/<stem>/. The seconds are split evenly between the
# targets (at least 1 s each).
#
#   scripts/run_fuzz.sh [SECONDS] [STEM...]   (default 60 s over every target)
#
# Idempotent: reconfigures only when build-fuzz has no CMake cache, rebuilds
# incrementally. Exits non-zero when a fuzzer finds a crash, leak, sanitizer
# report, or timeout that reproduces when its input runs alone (the remaining
# targets still run); the reproducer is left
# in fuzz/corpus-run/crashes/<stem>/ (copy it into fuzz/corpus/<stem>/ once
# fixed, so the corpus tests keep it).
# Env: JOBS (build parallelism, default 2), FUZZ_EXTRA_ARGS (extra libFuzzer flags).
set -euo pipefail

seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"

command -v clang++ >/dev/null || { echo "run_fuzz.sh: clang++ not found" >&2; exit 2; }

stems=("$@")
if [[ ${#stems[@]} -eq 0 ]]; then
  for f in "$root"/fuzz/*_fuzz.cc; do
    stem="$(basename "$f" _fuzz.cc)"
    stems+=("$stem")
  done
fi
[[ ${#stems[@]} -gt 0 ]] || { echo "run_fuzz.sh: no fuzz targets" >&2; exit 2; }
per=$(( seconds / ${#stems[@]} ))
(( per >= 1 )) || per=1

launcher=()
if command -v ccache >/dev/null; then  # as in build.sh
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true CCACHE_DEPEND=true
fi
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DOMNIBUS_FUZZ=ON "${launcher[@]}" \
    "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
fi
targets=()
for stem in "${stems[@]}"; do targets+=("${stem}_fuzz"); done
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for stem in "${stems[@]}"; do
  seeds="$root/fuzz/corpus/$stem"
  work="$root/fuzz/corpus-run/$stem"            # git-ignored working corpus
  crashes="$root/fuzz/corpus-run/crashes/$stem"  # git-ignored
  rm -rf "$work"
  mkdir -p "$work" "$crashes"
  if [[ -d "$seeds" ]]; then cp "$seeds"/* "$work"/; fi
  echo "run_fuzz.sh: ${stem}_fuzz for ${per} s"
  # -timeout: a single input slower than 10 s is a hang; -rss_limit_mb: an
  # input that makes the code allocate without bound is a bug too.
  rc=0
  "$build/${stem}_fuzz" "$work" -max_total_time="$per" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" ${FUZZ_EXTRA_ARGS:-} || rc=$?
  # A timeout (libFuzzer's exit code 70) is measured in wall time: a VM paused
  # or starved for 10 s times out whatever input was running. That input runs
  # once more, alone: a hang or a slow path reproduces and fails the run; an
  # input that now finishes is reported as a stall of the machine.
  if [[ $rc -eq 70 ]]; then
    slow=$(ls -t "$crashes"/timeout-* 2>/dev/null | head -1 || true)
    if [[ -n "$slow" ]] && "$build/${stem}_fuzz" -timeout=10 -runs=1 "$slow" >"$crashes/rerun.log" 2>&1; then
      echo "run_fuzz.sh: ${stem}_fuzz: the timeout did not reproduce ($slow ran alone:" \
           "$(grep -oE 'in [0-9]+ ms' "$crashes/rerun.log" | head -1)): a stall of the machine, not a hang"
      rc=0
    else
      echo "run_fuzz.sh: ${stem}_fuzz: the timeout reproduced with ${slow:-(no input saved)}" >&2
    fi
  fi
  [[ $rc -eq 0 ]] || status=$rc
done
exit "$status"
