#!/usr/bin/env bash
# Configures and builds one omnibus build tree.
#   scripts/build.sh [release|asan|tsan|debug]   (default release)
# release -> build/, asan -> build-asan/ (ASan+UBSan), tsan -> build-tsan/.
# Warnings are errors in every configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
jobs=${OMNIBUS_JOBS:-$(nproc)}
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  debug)   dir=build-debug; flags=(-DCMAKE_BUILD_TYPE=Debug) ;;
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DOMNIBUS_SANITIZE=address,undefined) ;;
  tsan)    dir=build-tsan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DOMNIBUS_SANITIZE=thread) ;;
  *) echo "build.sh: unknown kind '$kind'" >&2; exit 2 ;;
esac
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DOMNIBUS_WERROR=ON "${flags[@]}" >/dev/null
fi
[ -z "${OMNIBUS_CONFIGURE_ONLY:-}" ] || exit 0
cmake --build "$dir" -j "$jobs" "${@:2}"
