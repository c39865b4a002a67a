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
# ccache (installed by setup.sh) keeps compiled objects across build trees and
# clones: paths are taken relative to the checkout, so a fresh clone (CI) hits
# the objects of the last one. Cold, a build costs what it did without it.
if command -v ccache >/dev/null; then
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true CCACHE_DEPEND=true  # depend: no preprocessor run on a miss
fi
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DOMNIBUS_WERROR=ON "${flags[@]}" >/dev/null
fi
[ -z "${OMNIBUS_CONFIGURE_ONLY:-}" ] || exit 0
cmake --build "$dir" -j "$jobs" "${@:2}"
