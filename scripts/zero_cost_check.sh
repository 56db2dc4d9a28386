#!/usr/bin/env bash
# Proof that NullProfiler costs nothing: the same hot loop built without
# instrumentation, with NullProfiler and with AccumulatingProfiler is run under
# callgrind; the instruction count of dflash_hot_loop (inclusive) must be
# identical for the baseline and every zero-cost variant (NullProfiler,
# Composite<>, Composite<NullProfiler>, NullProfiler as dflash::bench hands it
# to a workload), and so must its
# machine code. Last line: "instructions: baseline=N null=N accumulating=M".
#
# With clang (the build's CMAKE_CXX_COMPILER_ID), the zero-cost variants must
# link (clang 14 failed to: `"row"_key`), call nothing and compute the same
# checksum; their machine code is compared and the difference shown, but not
# required to be identical: clang 14 allocates registers differently once a
# loop body declares any local (the empty scope/token objects), whatever the
# policy (see README "Zero cost, proved").
#
# usage: scripts/zero_cost_check.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}

# Variants that must match the baseline exactly, and those that only report.
zero_cost_variants=(null composite_empty composite_null bench_null)
costed_variants=(accumulating)
all=(baseline "${zero_cost_variants[@]}" "${costed_variants[@]}")

command -v valgrind >/dev/null || { echo "zero_cost_check: valgrind not found (scripts/setup.sh installs it)" >&2; exit 2; }
[[ -f $build/CMakeCache.txt ]] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
if ! log=$(cmake --build "$build" --target "${all[@]/#/zero_cost_}" 2>&1); then
  echo "$log" | tail -30
  echo "FAIL: the zero-cost variants do not build in $build"; exit 1
fi
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER_ID:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
[[ -n $compiler ]] || compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" | xargs -r basename)
strict=1
[[ $compiler == *[Cc]lang* ]] && strict=0
echo "compiler: $(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")$( ((strict)) || echo " (clang rules: no calls, same result)")"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A ir checksum
for v in "${all[@]}"; do
  exe=$build/benchmarks/zero_cost/zero_cost_$v
  checksum[$v]=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/$v.out" \
                   --toggle-collect=dflash_hot_loop "$exe" 2>"$tmp/$v.log") ||
    { echo "zero_cost_check: $v failed under valgrind" >&2; tail -20 "$tmp/$v.log" >&2; exit 2; }
  ir[$v]=$(callgrind_annotate "$tmp/$v.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  [[ -n ${ir[$v]} ]] || { echo "zero_cost_check: no count for $v" >&2; cat "$tmp/$v.log" >&2; exit 2; }
  # The function's instructions, without addresses, for a byte-level compare.
  objdump -d --no-show-raw-insn --no-addresses "$exe" |
    awk '/^<dflash_hot_loop>:/ {on=1; next} on && /^$/ {on=0} on' |
    sed -E 's/<[^>]*>//g; s/ +# .*//' >"$tmp/$v.asm"
done

status=0
for v in "${all[@]}"; do
  [[ ${checksum[$v]} == "${checksum[baseline]}" ]] ||
    { echo "FAIL: $v computes ${checksum[$v]}, baseline ${checksum[baseline]}"; status=1; }
done
for v in "${zero_cost_variants[@]}"; do
  # No variant may call anything from the hot loop (the baseline calls nothing).
  if grep -Eq '^\s*call' "$tmp/$v.asm"; then
    echo "FAIL: dflash_hot_loop of $v calls a function:"; grep -E '^\s*call' "$tmp/$v.asm" | head; status=1
  fi
  if ((!strict)); then
    if cmp -s "$tmp/baseline.asm" "$tmp/$v.asm"; then
      echo "machine code of dflash_hot_loop: $v identical to baseline ($(wc -l <"$tmp/$v.asm") instructions)"
    else
      echo "note ($compiler): $v has no calls; its register allocation differs from the baseline" \
           "($(wc -l <"$tmp/$v.asm") vs $(wc -l <"$tmp/baseline.asm") instructions, ${ir[$v]} vs ${ir[baseline]} executed)"
    fi
    continue
  fi
  if [[ ${ir[$v]} != "${ir[baseline]}" ]]; then
    echo "FAIL: $v runs ${ir[$v]} instructions, baseline ${ir[baseline]}"; status=1
  fi
  if cmp -s "$tmp/baseline.asm" "$tmp/$v.asm"; then
    echo "machine code of dflash_hot_loop: $v identical to baseline ($(wc -l <"$tmp/$v.asm") instructions)"
  else
    echo "FAIL: machine code of dflash_hot_loop differs between baseline and $v:"
    diff "$tmp/baseline.asm" "$tmp/$v.asm" | head -20
    status=1
  fi
done
extra=""
for v in "${zero_cost_variants[@]}" "${costed_variants[@]}"; do
  [[ $v == null || $v == accumulating ]] || extra+=" $v=${ir[$v]}"
done
[[ -z $extra ]] || echo "instructions (more variants):$extra"
echo "instructions: baseline=${ir[baseline]} null=${ir[null]} accumulating=${ir[accumulating]}"
exit $status
