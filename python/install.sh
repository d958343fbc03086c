#!/usr/bin/env bash
# Builds and installs the Python package into .venv: `pip install .` without build isolation
# (scikit-build-core and nanobind come from python/requirements.txt, installed by ./setup.sh)
# and with a kept build tree, build-python/, so a reinstall recompiles only what changed.
# The engine objects also come from ccache when the main build compiled them first.
set -euo pipefail
cd "$(dirname "$0")/.."
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"  # make, when ninja is absent
.venv/bin/python -m pip install -q --no-build-isolation --config-settings=build-dir=build-python .
