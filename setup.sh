#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a built engine and an embedded default model:
#   1. Debian packages (compiler, CMake, GoogleTest, Google Benchmark, JSON, HTTP, OpenMPI,
#      headless Chromium + its WebDriver for the chat page's browser test, and the aarch64 cross
#      compiler + qemu-user for tools/arm64/test.sh)
#   2. a Python venv in .venv with the tooling packages (checkpoint generator, tokenizer data)
#   3. a Release build in build/
#   4. models/golden: the checkpoints of the committed golden sets (tests/data/golden), regenerated
#   5. models/default: the embedded default, a small trained DeepSeek-V4 in the official layout
#      (copied from models-src/default; tools/train/ made it)
#   6. the Python package `deepinfer` (pip install . into .venv; python/)
set -euo pipefail
cd "$(dirname "$0")"

apt_packages=(build-essential cmake ccache git pkg-config libgtest-dev libgmock-dev libbenchmark-dev
              nlohmann-json3-dev libcpp-httplib-dev python3 python3-venv python3-pip
              clang libclang-rt-14-dev chromium chromium-driver
              openmpi-bin libopenmpi-dev  # MPI: multi-process expert parallel (optional at build time)
              g++-aarch64-linux-gnu qemu-user)  # the aarch64 cross build, run under qemu (tools/arm64/test.sh)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating Python venv .venv (tooling only; the engine never needs Python)"
  python3 -m venv .venv
fi
# Everything pinned (pip itself too), so two setups a month apart install the same things.
.venv/bin/python -m pip install -q pip==26.3
.venv/bin/python -m pip install -q -r tools/golden/requirements.txt -r tests/sdk/requirements.txt \
  -r tests/webui/requirements.txt \
  -r python/requirements.txt

echo "setup: building (Release) in build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"

echo "setup: regenerating the committed golden checkpoints into models/golden (sha256-checked)"
.venv/bin/python tools/golden/goldens.py regen --out models/golden

# The trained model ships in models-src/default (tools/train/); a models/default that differs
# from it (e.g. the random checkpoint earlier versions wrote here) is replaced.
if ! diff -rq models-src/default models/default >/dev/null 2>&1; then
  echo "setup: copying the embedded default checkpoint (trained, models-src/default) to models/default"
  mkdir -p models
  rm -rf models/default.partial
  cp -r models-src/default models/default.partial
  rm -rf models/default
  mv models/default.partial models/default
fi
echo "setup: installing the Python package (pip install .) into .venv"
python/install.sh

echo "setup: done. Try: build/deepinfer generate --prompt \"The capital of France is\" -n 16"
