#!/usr/bin/env bash
# Build the libFuzzer targets of fuzz/ with clang (ASan + UBSan) and run each for a bounded time over its
# committed seeds and reproducers. Fails when a target finds a crash or a broken property; the input is
# saved under build-fuzz/artifacts/ — commit it to fuzz/reproducers/NAME/ with the fix (its replay test
# in the normal build then guards the fix).
#   ci/fuzz.sh                       every target, OAR_FUZZ_SECONDS (default 30) each
#   ci/fuzz.sh safetensors dlpack    only these
# New inputs the fuzzers find go to build-fuzz/corpus/NAME/ (not committed).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${OAR_FUZZ_SECONDS:-30}
start=$(date +%s)

ci/install-deps.sh --fuzz

build=build-fuzz
mkdir -p "$build"
sanitize="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
echo "== fuzz: configure and build the targets with clang ($sanitize)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1 $sanitize" -DCMAKE_C_FLAGS_RELEASE="-O1 -g1 $sanitize" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DOAR_BUILD_FUZZERS=ON -DOAR_BUILD_TESTS=OFF -DOAR_BUILD_BENCHMARKS=OFF \
  -DOAR_WITH_CUDA=OFF -DOAR_WITH_HIP=OFF -DOAR_WITH_LEVEL_ZERO=OFF -DOAR_WITH_GPU_EMU=OFF > "$build/configure.log" ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target oar_fuzzers -j "$(nproc)"

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$build"/fuzz/*_fuzzer; do
    name=$(basename "$f")
    targets+=("${name%_fuzzer}")
  done
fi
mkdir -p "$build/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target per core at a time (each libFuzzer process is single-threaded): same time per target, less wall.
fuzz_one() {
  local name=$1 corpus="$build/corpus/$1" seeds=(fuzz/corpus/"$1") rc=0
  mkdir -p "$corpus"
  [[ -d fuzz/reproducers/$name ]] && seeds+=(fuzz/reproducers/"$name")
  # -timeout: an input taking 10 s is a hang; -rss_limit_mb: an input making us use 2 GB is a defect.
  "$build/fuzz/${name}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=262144 \
      -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" "$corpus" "${seeds[@]}" \
      > "$build/$name.log" 2>&1 || rc=$?
  echo "$rc" > "$build/$name.rc"
}
jobs=${JOBS:-$(nproc)}
for name in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
  echo "== fuzz: $name for ${seconds} s (seeds: fuzz/corpus/$name$([[ -d fuzz/reproducers/$name ]] && echo " fuzz/reproducers/$name"))"
  rm -f "$build/$name.rc"
  fuzz_one "$name" &
done
wait
failed=()
for name in "${targets[@]}"; do
  if [[ "$(cat "$build/$name.rc" 2>/dev/null)" != 0 ]]; then
    tail -n 60 "$build/$name.log"
    echo "fuzz: $name FAILED; reproducer: $(ls "$build"/artifacts/"$name"-* 2>/dev/null | head -n 1)"
    echo "      add it to fuzz/reproducers/$name/ together with the fix"
    failed+=("$name")
  else
    echo -n "fuzz: $name: "
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$build/$name.log" | tr '\n' ' '
    echo
  fi
done
echo "== fuzz: ${#targets[@]} targets in $(( $(date +%s) - start )) s, ${#failed[@]} failed ${failed[*]:-}"
[[ ${#failed[@]} -eq 0 ]]
