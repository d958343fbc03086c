#!/usr/bin/env bash
# The test command (README.md, .ci/run): every CTest test of the Release build.
set -euo pipefail
cd "$(dirname "$0")"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
