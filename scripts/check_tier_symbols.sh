#!/usr/bin/env bash
# Checks that the kernel objects built for a higher ISA tier (*_vnni.cc.o,
# *_avx512.cc.o, *_amx.cc.o) define no symbol outside their tier's namespace that another
# object could also define: an inline function emitted there (say from a
# shared header) could be the copy the linker keeps for the whole program,
# and would then run AVX-512 code on a CPU without it (SIGILL).
#   scripts/check_tier_symbols.sh <dir with the kernels' object files>
set -euo pipefail
dir=${1:?usage: check_tier_symbols.sh OBJECT_DIR}
shopt -s nullglob
objs=("$dir"/*_vnni.cc.o "$dir"/*_avx512.cc.o "$dir"/*_amx.cc.o)
[ ${#objs[@]} -gt 0 ] || { echo "check_tier_symbols: no tier objects in $dir" >&2; exit 1; }
bad=0
for o in "${objs[@]}"; do
  case "$o" in *_vnni.cc.o) ns=avx_vnni ;; *_amx.cc.o) ns=amx ;; *) ns=avx512 ;; esac
  # Defined, externally visible code (T, W, i) or data not in omnibus::...::<ns>::,
  # except DW.ref.__gxx_personality_v0: a pointer to the C++ runtime's
  # exception personality that instrumented (sanitizer) builds emit as a weak
  # object in every file; it holds an address, no code of this tier.
  leaks=$(nm -C --defined-only --extern-only "$o" | awk '{ t = $2; $1 = ""; $2 = ""; sub(/^  /, ""); print t, $0 }' |
          grep -v "::${ns}::" | grep -v '^V DW\.ref\.__gxx_personality_v0$' || true)
  if [ -n "$leaks" ]; then
    echo "check_tier_symbols: $o defines symbols outside namespace ${ns}:" >&2
    echo "$leaks" | head -20 >&2
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "check_tier_symbols: ${#objs[@]} tier objects define only their tier's symbols"
exit $bad
