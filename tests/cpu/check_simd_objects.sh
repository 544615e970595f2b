#!/bin/sh
# The AVX2 and AVX-512 kernel objects must define nothing the linker could
# share with code built for another instruction set: no weak (inline or
# template) symbols and no global functions, only their kernel table. An
# inline function emitted there with AVX instructions could otherwise be the
# copy the linker keeps for callers on processors without them.
#
#   check_simd_objects.sh 'OBJ1;OBJ2;...'   (the objects of moetier_cpu_kernels)
#
# Exit status 77 (a ctest skip) when nm is missing.
set -eu
command -v nm > /dev/null 2>&1 || { echo "SKIPPED: nm is not installed"; exit 77; }
checked=0
status=0
old_ifs=$IFS
IFS=';'
for obj in $1; do
  IFS=$old_ifs
  case "$obj" in
    *kernels_avx2.cc.o) table=kAvx2Kernels ;;
    *kernels_avx512.cc.o) table=kAvx512Kernels ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  # Defined symbols with external or weak binding; the table is the one
  # allowed (and DW.ref.*, the exception personality's data pointer that
  # sanitizer builds add, which holds no code).
  leaked=$(nm -C --defined-only "$obj" | awk '$2 ~ /^[A-Zuvw]$/ && $2 != "N"' |
           grep -v -e " moetier::cpu::$table\$" -e " DW\.ref\." || true)
  if [ -n "$leaked" ]; then
    echo "$obj defines symbols other code could link to:"
    echo "$leaked"
    status=1
  else
    echo "$obj: only $table"
  fi
done
if [ "$checked" -ne 2 ]; then
  echo "expected the AVX2 and AVX-512 kernel objects among the arguments, found $checked"
  exit 1
fi
exit $status
