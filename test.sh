#!/usr/bin/env bash
# The test command (README.md; .ci/run calls it after ./setup.sh):
#   0. the Python package reinstalled into .venv if its sources changed (python/install.sh)
#   1. every CTest test of the Release build in build/ (the package's pytest suite among them)
#   2. the same suite built with AddressSanitizer + UndefinedBehaviorSanitizer in build-san/
#      (configured and built here on first use; incremental afterwards)
#   3. the libFuzzer targets of tests/fuzz (parsers) for a bounded time each
# Pass --fast to run only the Release tests while iterating.
set -euo pipefail
cd "$(dirname "$0")"
jobs="$(nproc)"

echo "== Python package (python/install.sh: rebuilds what changed)"
python/install.sh

echo "== Release tests (build/)"
ctest --test-dir build --output-on-failure -j"$jobs"

if [ "${1:-}" = "--fast" ]; then
  exit 0
fi
echo "== ASan + UBSan tests (build-san/)"
# -g1 (line tables: what the sanitizers' stack traces print) builds much faster than -g.
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_SANITIZE=ON \
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
