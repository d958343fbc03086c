#!/usr/bin/env bash
# Builds and installs the Python package into .venv: `pip install .` without build isolation
# (scikit-build-core and nanobind come from python/requirements.txt, installed by ./setup.sh)
# and with a kept build tree, build-python/, so a reinstall recompiles only what changed.
# The engine's objects come from ccache when the main build (build/) compiled them first:
# on 2 cores the package then builds in ~1.5 min instead of ~10.
set -euo pipefail
cd "$(dirname "$0")/.."
# The main build's compiler, by the same name: ccache keys on it (c++ and g++ differ), and
# scikit-build-core would otherwise take Python's (g++).
if [ -z "${CXX:-}" ] && [ -f build/CMakeCache.txt ]; then
  main_cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' build/CMakeCache.txt)"
  if [ -n "$main_cxx" ]; then export CXX="$main_cxx"; fi
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"  # make, when ninja is absent
.venv/bin/python -m pip install -q --no-build-isolation --config-settings=build-dir=build-python .
