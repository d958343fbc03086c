#!/usr/bin/env bash
# The aarch64 stage: the engine's kernels and model cross-compiled for 64-bit Arm with Debian's
# cross toolchain (g++-aarch64-linux-gnu, cmake/aarch64-linux-gnu.cmake) and their tests run
# under qemu-user (qemu-aarch64; ./setup.sh installs both), on two emulated CPUs:
#   -cpu max         Armv8 with the BF16 extension: the NEON + BF16 kernels (bf16 mode with
#                    the AVX-512 kernels' bits), and every other variant it supports (NEON,
#                    scalar), which the kernel tests force one by one;
#   -cpu cortex-a72  no BF16: the dispatcher falls back to the plain NEON kernels (the AVX2
#                    kernels' bits), through which the backend-level tests then run.
# Tests: every kernel test (tests/kernels; CrossIsaBits.* compares the NEON kernels' bits with
# fingerprints recorded on x86), and the golden tests that run the model on the shared goldens
# (../shared/golden): reference numerics bit-identical to DeepSeek's code on the first rows
# (the referee's double arithmetic and libm on aarch64), the fast kernels within the goldens'
# tolerances (V4 on the NEON kernels, V4.1 on NEON + BF16). Left out under emulation (each
# tens of seconds there; they run natively in ./test.sh): the FMA peak measurement on -cpu max
# and the longer golden sweeps.
# Then the golden models' logits per kernel variant (IsaLogits.*) against the x86 Release
# build's (build/, as ./test.sh leaves it; skipped when it is missing or older than the
# sources): scalar = scalar, NEON = AVX2, NEON + BF16 = AVX-512, bit for bit.
# Incremental (build-arm64/, through ccache when installed); prints one summary line.
# Usage: tools/arm64/test.sh [build-dir]   (X86_BUILD=dir: another x86 build to compare with)
set -euo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
build=${1:-build-arm64}
sysroot=/usr/aarch64-linux-gnu

for tool in aarch64-linux-gnu-g++ qemu-aarch64 cmake; do
  if ! command -v "$tool" >/dev/null; then
    echo "arm64: FAILED: $tool not found (./setup.sh installs g++-aarch64-linux-gnu and qemu-user)"
    exit 1
  fi
done

echo "== arm64: cross build ($build/)"
cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DDEEPINFER_KERNELS_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target test_kernels test_golden
t_build=$(date +%s)

kernels_max='-CpuIsa.FmaChainsComputeTheirRecurrenceAndPeakIsMeasured'
kernels_a72='CpuIsa.FeaturesAndDispatch:CpuIsa.FmaChains*:CrossIsaBits.*:CpuAttention.*:CpuBackend.*:RowInvariance.*'
golden_max='V41Golden.CpuKernelsStayWithinTheSpread:IsaLogits.*'
golden_a72='GoldenTest.TinyV4cReferenceMatchesOfficialCode:GoldenTest.CpuKernelsMeetTheSameTolerances'

# run NAME CPU BINARY FILTER: the test binary under qemu, its output in $build/arm64-NAME.log.
run() {
  local log="$build/arm64-$1.log"
  set +e
  qemu-aarch64 -L "$sysroot" -cpu "$2" "$build/tests/$3" --gtest_filter="$4" --gtest_brief=1 >"$log" 2>&1
  echo $? >"$log.rc"
  set -e
}
echo "== arm64: tests under qemu-aarch64 (-cpu max, -cpu cortex-a72)"
# Two streams side by side, one per emulated CPU (the emulator runs a thread per core at best).
{ run kernels-max max test_kernels "$kernels_max"; run golden-max max test_golden "$golden_max"; } &
{ run kernels-a72 cortex-a72 test_kernels "$kernels_a72"; run golden-a72 cortex-a72 test_golden "$golden_a72"; } &
wait
t_end=$(date +%s)

status=0
passed=0
skipped=0
parts=()
for name in kernels-max kernels-a72 golden-max golden-a72; do
  log="$build/arm64-$name.log"
  rc=$(cat "$log.rc")
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log")
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log")
  p=${p:-0}
  s=${s:-0}
  passed=$((passed + p))
  skipped=$((skipped + s))
  parts+=("$name $p")
  if [ "$rc" != 0 ] || [ "$p" = 0 ]; then
    status=1
    echo "arm64: $name FAILED (exit $rc), $log:"
    grep -E '^\[  FAILED  \]|Failure|rror' "$log" | head -40 || tail -20 "$log"
  fi
done
# The logits against x86's: the same model, tokens and kernel arithmetic on both machines.
x86_build=${X86_BUILD:-build}
x86_bin="$x86_build/tests/test_model"
logits="logits vs x86: skipped (no $x86_bin)"
if [ -x "$x86_bin" ]; then
  if [ -n "$(find src tests/model -newer "$x86_bin" -name '*.[ch]*' -print -quit)" ]; then
    logits="logits vs x86: skipped ($x86_bin is older than the sources)"
  else
    x86_lines="$("$x86_bin" --gtest_filter='IsaLogits.*' 2>/dev/null | grep '^isa-logits ' | sed 's/ avx2 / neon /; s/ avx512 / neon-bf16 /' || true)"
    arm_lines="$(grep '^isa-logits ' "$build/arm64-golden-max.log" || true)"
    same=0
    differ=()
    while read -r _ set isa mode bits; do
      [ -z "$set" ] && continue
      want=$(grep "^isa-logits $set $isa $mode " <<<"$x86_lines" | awk '{print $5}')
      [ -z "$want" ] && continue  # a variant this x86 CPU lacks
      if [ "$want" = "$bits" ]; then same=$((same + 1)); else differ+=("$set/$isa/$mode"); fi
    done <<<"$arm_lines"
    if [ ${#differ[@]} -gt 0 ]; then
      status=1
      logits="logits vs x86: ${#differ[@]} DIFFER (${differ[*]}), $same equal"
    elif [ $same -eq 0 ]; then
      status=1
      logits="logits vs x86: FAILED (no fingerprints to compare)"
    else
      logits="logits bit-identical to x86 in $same of $same (scalar=scalar, neon=avx2, neon-bf16=avx512)"
    fi
  fi
fi
dispatch=$(sed -n 's/^cpu features: .*; dispatch: \(.*\)$/\1/p' "$build/arm64-kernels-max.log" "$build/arm64-kernels-a72.log" |
  paste -sd/ -)
summary="$passed tests passed ($(IFS=,; echo "${parts[*]}" | sed 's/,/, /g'); $skipped skipped: x86-only, or BF16 on the a72), dispatch max/a72: ${dispatch:-?}; $logits; build $((t_build - t0)) s, qemu tests $((t_end - t_build)) s, total $((t_end - t0)) s"
if [ $status -eq 0 ]; then
  echo "arm64: PASSED: $summary"
else
  echo "arm64: FAILED: $summary"
fi
exit $status
