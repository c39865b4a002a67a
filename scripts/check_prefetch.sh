#!/usr/bin/env bash
# Checks that the packed matmul kernels of every tier still carry their
# software prefetches: GCC 12 once deleted every prefetch of the pair and amx
# kernels (loops of nothing but _mm_prefetch, removed under -ffinite-loops)
# and no test noticed, since a prefetch changes no result, only the speed
# (matmul_packed_prefetch.h, prefetch_line). Counts prefetcht0 / prefetcht1
# per kernel function in each packed tier object; every object must have
# some (the amx kernels' are issued between their tile steps),
# and each avx512 wide pair kernel (*wide512*) its own, or a jump to its
# compiled-in variants (*wide512_at*), which must have theirs.
#   scripts/check_prefetch.sh <dir with the kernels' object files>
set -euo pipefail
dir=${1:?usage: check_prefetch.sh OBJECT_DIR}
shopt -s nullglob
objs=("$dir"/matmul_packed_*_*.cc.o)
[ ${#objs[@]} -gt 0 ] || { echo "check_prefetch: no packed kernel objects in $dir" >&2; exit 1; }
bad=0
checked=0
for o in "${objs[@]}"; do
  case "$o" in *_avx2.cc.o | *_vnni.cc.o | *_avx512.cc.o | *_amx.cc.o) ;; *) continue ;; esac
  # function name -> prefetch count, for the functions the rule covers
  report=$(objdump -d -C --no-show-raw-insn "$o" | awk '
    /^[0-9a-f]+ <.*>:$/ { f = $0; sub(/^[0-9a-f]+ </, "", f); sub(/>:$/, "", f); n[f] += 0; next }
    /prefetcht[01]/ { n[f]++; total++ }
    # a wrapper that picks a compiled-in variant (kernel_*_wide512 -> *_wide512_at<..., Far>)
    /(call|jmp) .*wide512_at/ { wraps[f] = 1 }
    END {
      print "total", total + 0
      for (k in n) if (k ~ /wide512/ && k !~ /^_GLOBAL__/) print (n[k] > 0 || wraps[k] ? "ok" : "none"), k
    }')
  total=$(echo "$report" | awk '$1 == "total" { print $2 }')
  if [ "$total" -eq 0 ]; then
    echo "check_prefetch: $o: not a single prefetch instruction" >&2
    bad=1
    continue
  fi
  missing=$(echo "$report" | grep '^none ' || true)
  if [ -n "$missing" ]; then
    echo "check_prefetch: $o: kernels without a prefetch instruction:" >&2
    echo "$missing" | head -10 >&2
    bad=1
  fi
  checked=$((checked + 1))
done
[ $checked -gt 0 ] || { echo "check_prefetch: no packed tier object carries a prefetch" >&2; exit 1; }
[ $bad -eq 0 ] && echo "check_prefetch: $checked packed tier objects carry their prefetches"
exit $bad
