#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_*.cpp as a libFuzzer target (clang, with ASan + UBSan) and runs
# each for FUZZ_SECONDS (default 20) on its seed corpus tests/fuzz/corpus/<name>/ (name =
# file name without fuzz_). A harness lists the project sources it needs on a first-line
# comment "// fuzz-sources: a.cpp b.cpp". Exits non-zero on the first crash, leak or hang
# (one input running past 30 s).
#
# Each source is compiled once into an object (through ccache when it is installed), however
# many harnesses list it, and the compiles and the fuzzers run nproc at a time: the tokenizer's
# sources serve three harnesses.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${FUZZ_SECONDS:-20}"
jobs="$(nproc)"
out=build-fuzz
mkdir -p "$out/obj"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Isrc)
launcher=()
if command -v ccache >/dev/null; then launcher=(env CCACHE_BASEDIR="$PWD" ccache); fi

obj_of() { local s=${1//\//_}; echo "$out/obj/${s%.cpp}.o"; }

names=()
sources=()
for harness in tests/fuzz/fuzz_*.cpp; do
  name=$(basename "$harness" .cpp)
  names+=("${name#fuzz_}")
  sources+=("$harness" $(sed -n '1s#^// fuzz-sources:##p' "$harness"))
done
echo "== fuzz: compiling $(printf '%s\n' "${sources[@]}" | sort -u | wc -l) sources for ${#names[@]} targets"
export FUZZ_CXX="${launcher[*]} clang++ ${flags[*]}"
printf '%s\n' "${sources[@]}" | sort -u | while read -r s; do echo "$s $(obj_of "$s")"; done |
  xargs -P "$jobs" -n 2 bash -c '$FUZZ_CXX -c "$0" -o "$1"'

for name in "${names[@]}"; do
  harness="tests/fuzz/fuzz_$name.cpp"
  objs=("$(obj_of "$harness")")
  for s in $(sed -n '1s#^// fuzz-sources:##p' "$harness"); do objs+=("$(obj_of "$s")"); done
  clang++ -fsanitize=fuzzer,address,undefined "${objs[@]}" -o "$out/fuzz_$name" -lpthread
done

# One fuzzer: its corpus seeded from the repository, its log beside it; the exit status says.
run_one() {
  local name=$1 seconds=$2 corpus="build-fuzz/corpus_$1"
  mkdir -p "$corpus"
  [ -d "tests/fuzz/corpus/$name" ] && cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  "build-fuzz/fuzz_$name" "$corpus" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=0 \
    > "build-fuzz/fuzz_$name.log" 2>&1
}
export -f run_one
rm -f "$out"/*.ok
echo "== fuzz: running ${#names[@]} targets for ${seconds}s each, $jobs at a time"
printf '%s\n' "${names[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {} '"$seconds"' && touch build-fuzz/{}.ok || rm -f build-fuzz/{}.ok' || true
status=0
for name in "${names[@]}"; do
  if [ -f "$out/$name.ok" ]; then
    grep -E "^#[0-9]+ +DONE" "$out/fuzz_$name.log" | tail -1 || true
    echo "fuzz $name: ok"
  else
    tail -40 "$out/fuzz_$name.log"
    echo "fuzz $name: FAILED (log: $out/fuzz_$name.log)"
    status=1
  fi
done
exit $status
