#!/usr/bin/env bash
# The test command (README.md; .ci/run calls it after ./setup.sh):
#   0. the Python package reinstalled into .venv if its sources changed (python/install.sh)
#   1. the Release build in build/ brought up to date, then every CTest test of it (the package's
#      pytest suite among them); every skipped test is named, a skipped or unregistered suite
#      that ./setup.sh installs for (Chromium, MPI, the Python package) fails, and a CPU without
#      AVX-512 / AMX gets one line saying those kernels were not exercised
#   2. the same suite built with AddressSanitizer + UndefinedBehaviorSanitizer in build-san/
#      (configured and built here on first use; incremental afterwards)
#   3. the libFuzzer targets of tests/fuzz (parsers) for a bounded time each
#   4. the aarch64 cross build's kernel and golden tests under qemu-aarch64 (tools/arm64/test.sh)
# Pass --fast to run only the Release tests while iterating.
set -euo pipefail
cd "$(dirname "$0")"
jobs="$(nproc)"

echo "== Citations (every docs/model/<note>.md §N a comment cites exists; none cites a file the repository lacks)"
bash tools/check_citations.sh

echo "== Python package (python/install.sh: rebuilds what changed)"
python/install.sh

# Suites ./setup.sh installs what they need for (Chromium, OpenMPI, the Python package): each
# must be registered and must run; a skip of one of them fails this script.
required_suites=(python_package webui_chromium mpi_logits mpi_faults mpi_serve)

# Names every skipped test of a ctest run (its output in $2) and every test skipped inside a
# suite (pytest's "N skipped"); fails when a required suite is missing or skipped.
check_skips() {
  local dir=$1 out=$2 bad=0
  local registered skipped
  registered="$(ctest --test-dir "$dir" -N | sed -n 's/^ *Test *#[0-9]*: //p')"
  skipped="$(sed -n 's/.*Test *#[0-9]*: \([^ ]*\) .*\*\*\*Skipped.*/\1/p' "$out")"
  for t in $skipped; do echo "SKIPPED: $t"; done
  grep -h -E '^[0-9]+ passed.* [0-9]+ skipped|^[0-9]+ skipped' "$dir/Testing/Temporary/LastTest.log" 2>/dev/null |
    sed 's/^/SKIPPED inside a suite: /' || true
  for s in "${required_suites[@]}"; do
    if ! grep -qx "$s" <<<"$registered"; then
      echo "FAILED: the suite $s is not registered (CMake did not find what ./setup.sh installs for it)"
      bad=1
    elif grep -qx "$s" <<<"$skipped"; then
      echo "FAILED: the suite $s skipped"
      bad=1
    fi
  done
  return $bad
}

# The tuned AVX-512 / AMX kernels run only where the CPU has them: say so when they did not.
isa_note() {
  local missing=()
  grep -qw avx512f /proc/cpuinfo || missing+=(AVX-512)
  grep -qw amx_tile /proc/cpuinfo || missing+=(AMX)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "NOTE: this CPU has no ${missing[*]}: those kernels were not exercised (their tests skip or run the other ISA)"
  fi
}

echo "== Release build (build/: the tests run what is in the tree now, not older binaries)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"

echo "== Release tests (build/)"
ctest_out="$(mktemp)"
trap 'rm -f "$ctest_out"' EXIT
status=0
ctest --test-dir build --output-on-failure -j"$jobs" 2>&1 | tee "$ctest_out" || status=1
check_skips build "$ctest_out" || status=1
isa_note
if [ $status -ne 0 ] || [ "${1:-}" = "--fast" ]; then
  exit $status
fi
echo "== ASan + UBSan tests (build-san/)"
# -g1 (line tables: what the sanitizers' stack traces print) builds much faster than -g.
# The microbenchmarks have no tests: not compiled a second time.
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_SANITIZE=ON -DDEEPINFER_BENCHMARKS=OFF \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" >/dev/null
cmake --build build-san -j"$jobs"
# Client deadlines in the Python tests stretch with the sanitizers' slowdown.
# Left to the Release pass: the long numeric sweeps (more positions through the code paths the
# engine and model tests already run here) and the client-compatibility suites (Python SDKs,
# the browser page, the Python package), which test protocols, not memory safety.
san_skip='LongContext|sdk_openai_anthropic|webui_chromium|python_package|BatchInvariance|HfGolden|GoldenTest\.(DecodeAndChunks|CpuKernels)|V41Golden\.DecodeAndChunks|V41Float|PagedState\.BlockSizeChangesNothing'
DEEPINFER_TEST_TIME_SCALE=5 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-san --output-on-failure -j"$jobs" -E "$san_skip"

echo "== fuzzers (tests/fuzz, ${FUZZ_SECONDS:-20}s each)"
tests/fuzz/run.sh

echo "== aarch64 (tools/arm64/test.sh: cross build, kernel + golden tests under qemu-aarch64, bits against x86)"
tools/arm64/test.sh
