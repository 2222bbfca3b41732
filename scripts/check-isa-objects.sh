#!/usr/bin/env bash
# usage: scripts/check-isa-objects.sh OBJECT...   (an argument may be a ;-separated list, as
# CMake's $<TARGET_OBJECTS:...> gives it to a test)
# The objects compiled for an instruction set above the baseline (*_avx2.cc, *_avx512.cc) must
# define no weak function (weak data is harmless): the linker keeps one copy of an inline function with external
# linkage for the whole program, and the copy it keeps could be the one compiled for AVX-512,
# which an AVX2-only machine would then run. Their headers' helpers have internal linkage for
# this reason (core/matmul_avx2.h says how); this check keeps it so.
set -eu
bad=0
checked=0
IFS=';' read -r -a objects <<<"$*"
for o in "${objects[@]}"; do
  o=${o# }
  case "$o" in
    *_avx2.cc.o | *_avx512.cc.o) ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  # W: weak symbols that are not data objects, i.e. code. Weak data (V, and u: an inline
  # variable such as a constexpr table) holds the same bytes whichever copy is kept.
  weak=$(nm -C --defined-only "$o" | awk '$2 == "W"')
  if [ -n "$weak" ]; then
    echo "$o defines weak symbols (give them internal linkage):"
    echo "$weak"
    bad=1
  fi
done
if [ "$checked" -eq 0 ]; then
  echo "check-isa-objects: no *_avx2 / *_avx512 object among the arguments"
  exit 1
fi
echo "check-isa-objects: $checked objects, $([ $bad = 0 ] && echo 'no weak symbols' || echo 'FAILED')"
exit $bad
