#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU (written for an H200 with 16 cores): configure with
# CUDA, build, run the cuda plugin's tests, certify cuda:0 with the conformance runner, train the three
# example models on cuda:0 and cpu:0 and compare their final metrics, and run the GPU benchmarks.
#
#   ci/gpu-check.sh                    everything, logs under $OUT (default ./gpu-check-out)
#   BUILD=dir JOBS=n CUDA_ARCHS=90     build folder (default build-gpu), parallel jobs (16), SASS targets
#   STEPS_MLP / STEPS_CNN / STEPS_LLAMA training steps per model (defaults keep the run short)
#   METRIC_TOLERANCE=0.05              largest relative difference of a final metric, cuda vs cpu
#   SKIP_BUILD=1                       reuse an existing build
#
# Every step runs even when an earlier one failed (except after a failed build); $OUT/summary.txt lists
# each with OK/FAILED, and the exit status is 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-$PWD/gpu-check-out}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-16}
CUDA_ARCHS=${CUDA_ARCHS:-90}
STEPS_MLP=${STEPS_MLP:-300}
STEPS_CNN=${STEPS_CNN:-60}
STEPS_LLAMA=${STEPS_LLAMA:-60}
METRIC_TOLERANCE=${METRIC_TOLERANCE:-0.05}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
status=0

note() { echo "$*" | tee -a "$summary"; }
# step NAME TIMEOUT_S COMMAND...: run with a time limit, log to $OUT/NAME.log, record the outcome.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "== $name: $*"
  if timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; then
    note "OK      $name ($((SECONDS - t0)) s)"
  else
    local rc=$?
    note "FAILED  $name (exit $rc after $((SECONDS - t0)) s; see $name.log)"
    tail -n 20 "$OUT/$name.log"
    status=1
    return 1
  fi
}

{ nvidia-smi || echo "nvidia-smi not available"; } > "$OUT/nvidia-smi.txt" 2>&1
note "gpu-check on $(hostname) at $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  step configure 300 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOAR_WITH_CUDA=ON \
    -DOAR_WITH_HIP=OFF -DOAR_CUDA_ARCHITECTURES="$CUDA_ARCHS" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" || exit 1
  step build 1500 cmake --build "$BUILD" -j "$JOBS" || { note "build failed: nothing else can run"; exit 1; }
fi

step devices 60 "$BUILD/bin/oar" devices
grep -q "cuda:0" "$OUT/devices.log" || { note "FAILED  devices: cuda:0 not listed"; status=1; }
step cuda_plugin_test 600 "$BUILD/tests/oar_cuda_plugin_test" --gtest_output="xml:$OUT/cuda_plugin_test.xml"
if grep -q '^\[  SKIPPED \] GpuDevice' "$OUT/cuda_plugin_test.log" 2>/dev/null; then
  note "FAILED  cuda_plugin_test: device tests were skipped on a GPU machine ($(grep -m1 'no cuda device' "$OUT/cuda_plugin_test.log"))"
  status=1
fi
step gpu_kernels_host_test 120 "$BUILD/tests/oar_gpu_kernels_host_test"
step check_device_code 60 plugins/gpu_common/check_device_code.sh cuda "$BUILD/lib/oar/plugins/liboar_plugin_cuda.so" "${CUDA_ARCHS//;/,}"
step conformance 1800 "$BUILD/bin/oar" conformance --device cuda:0 --level L2 --jobs "$JOBS" --report-dir "$OUT/conformance"

# Train each example on both devices with the same seed; the final metrics must agree.
for model in mlp cnn llama; do
  var="STEPS_${model^^}"
  steps=${!var}
  for device in cpu:0 cuda:0; do
    step "train_${model}_${device%%:*}" 1800 "$BUILD/bin/oar" train "$model" --device "$device" --steps "$steps" --seed 1
  done
  cpu=$(awk '/^final/ {print $3}' "$OUT/train_${model}_cpu.log" 2>/dev/null)
  gpu=$(awk '/^final/ {print $3}' "$OUT/train_${model}_cuda.log" 2>/dev/null)
  if [[ -n "$cpu" && -n "$gpu" ]]; then
    if awk -v a="$cpu" -v b="$gpu" -v t="$METRIC_TOLERANCE" \
         'BEGIN { d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a; exit !(d <= t * (s > 1e-12 ? s : 1)) }'; then
      note "OK      metric $model: cpu $cpu, cuda $gpu (tolerance $METRIC_TOLERANCE relative)"
    else
      note "FAILED  metric $model: cpu $cpu, cuda $gpu differ by more than $METRIC_TOLERANCE relative"
      status=1
    fi
  else
    note "FAILED  metric $model: no 'final' line from one of the runs"
    status=1
  fi
done

step gpu_bench 900 "$BUILD/bin/oar_gpu_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="$OUT/gpu_bench.json" --benchmark_out_format=json
step oar_bench 900 "$BUILD/bin/oar_bench" "--benchmark_filter=^(dispatch|matmul)/"

note "done: $(grep -c '^OK' "$summary") ok, $(grep -c '^FAILED' "$summary") failed"
exit $status
