#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_*.cpp as a libFuzzer target (clang, with ASan + UBSan) and runs
# each for FUZZ_SECONDS (default 20) on its seed corpus tests/fuzz/corpus/<name>/ (name =
# file name without fuzz_). A harness lists the project sources it needs on a first-line
# comment "// fuzz-sources: a.cpp b.cpp". Exits non-zero on the first crash, leak or hang
# (one input running past 30 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${FUZZ_SECONDS:-20}"
out=build-fuzz
mkdir -p "$out"
status=0
for harness in tests/fuzz/fuzz_*.cpp; do
  name=$(basename "$harness" .cpp)
  name=${name#fuzz_}
  sources=$(sed -n '1s#^// fuzz-sources:##p' "$harness")
  echo "== fuzz $name (${seconds}s)"
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Isrc "$harness" $sources -o "$out/fuzz_$name" -lpthread
  corpus="$out/corpus_$name"
  mkdir -p "$corpus"
  [ -d "tests/fuzz/corpus/$name" ] && cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  if ! "$out/fuzz_$name" "$corpus" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=0 \
       > "$out/fuzz_$name.log" 2>&1; then
    tail -40 "$out/fuzz_$name.log"
    echo "fuzz $name: FAILED (log: $out/fuzz_$name.log)"
    status=1
  else
    grep -E "^#[0-9]+ +DONE" "$out/fuzz_$name.log" | tail -1 || true
    echo "fuzz $name: ok"
  fi
done
exit $status
