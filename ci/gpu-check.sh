#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU (written for an H200 with 16 cores): configure with
# CUDA, build, run the cuda plugin's tests, certify cuda:0 with the conformance runner, train the three
# example models on cuda:0 and cpu:0 and compare their final metrics, and run the GPU benchmarks.
#
#   ci/gpu-check.sh                    everything, logs under $OUT (default ./gpu-check-out)
#   BUILD=dir JOBS=n CUDA_ARCHS=90     build folder (default build-gpu), parallel jobs (16), SASS targets
#   STEPS_MLP / STEPS_CNN / STEPS_LLAMA training steps per model (defaults keep the run short)
#   LEVEL=L2                           the conformance level to certify
#   MODELS="mlp cnn llama"             the example models trained on both devices
#   METRIC_TOLERANCE=0.05              largest relative difference of a final metric, cuda vs cpu
#   SKIP_BUILD=1                       reuse an existing build, or a bundle made by ci/gpu-bundle.sh
#                                      (BUILD=gpu-bundle): its lib/deps goes on LD_LIBRARY_PATH
#   SKIP_BENCH=1                       leave out the benchmarks
#   VENDOR=gpu_emu                     rehearse the whole script without a GPU: the same steps on the
#                                      host-CPU emulator of the shared cuda/hip sources (no nvcc needed;
#                                      the cuda-only steps — device code check, cuBLAS benchmarks — are left out)
#
# Only what the steps run is built (oar, the cpu plugin, the vendor plugin and its tests, the benchmarks),
# to keep the build inside a short GPU lease.
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
LEVEL=${LEVEL:-L2}
MODELS=${MODELS:-mlp cnn llama}
METRIC_TOLERANCE=${METRIC_TOLERANCE:-0.05}
VENDOR=${VENDOR:-cuda}
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
DEVICE="$VENDOR:0"
case "$VENDOR" in
  cuda) vendor_flags=(-DOAR_WITH_CUDA=ON -DOAR_CUDA_ARCHITECTURES="$CUDA_ARCHS" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
        targets=(oar_gpu_bench) ;;
  gpu_emu) vendor_flags=(-DOAR_WITH_CUDA=OFF -DOAR_WITH_GPU_EMU=ON)
           targets=()
           export OAR_PLUGIN_PATH="$BUILD/lib/oar/emu" ;;
  *) echo "gpu-check: VENDOR must be cuda or gpu_emu, not '$VENDOR'" >&2; exit 2 ;;
esac
targets+=(oar oar_plugin_cpu "oar_plugin_$VENDOR" "oar_${VENDOR}_plugin_test" oar_gpu_kernels_host_test oar_bench)
# The plugin test loads this plugin, wherever the build or bundle lies now.
export OAR_TEST_PLUGIN="$BUILD/lib/oar/plugins/liboar_plugin_$VENDOR.so"
[[ "$VENDOR" == gpu_emu ]] && OAR_TEST_PLUGIN="$BUILD/lib/oar/emu/liboar_plugin_gpu_emu.so"
if [[ -d "$BUILD/lib/deps" ]]; then  # a bundle: the libraries it carries, then the toolkit's wherever it is
  cuda_dirs=$(find /usr/local/cuda*/lib* /usr/local/cuda*/targets/*/lib /opt /usr/lib/python3*/site-packages/nvidia \
                -maxdepth 4 \( -name 'libcublas.so.*' -o -name 'libnccl.so.*' -o -name 'libnvrtc.so.*' \) 2>/dev/null |
              xargs -r -n1 dirname | sort -u | paste -sd: -)
  export LD_LIBRARY_PATH="$BUILD/lib/deps${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
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
note "gpu-check on $(uname -n) at $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  step configure 300 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOAR_WITH_HIP=OFF \
    -DOAR_WITH_LEVEL_ZERO=OFF "${vendor_flags[@]}" || exit 1
  step build 1500 cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" || {
    note "build failed: nothing else can run"; exit 1; }
fi

# Every program and plugin finds its libraries (a bundle on a foreign machine is where this fails first).
for f in "$BUILD/bin/oar" "$OAR_TEST_PLUGIN" "$BUILD/lib/oar/plugins/liboar_plugin_cpu.so"; do
  missing=$(ldd "$f" 2>&1 | grep "not found" | awk '{print $1}' | paste -sd' ' -)
  [[ -z "$missing" ]] || { note "FAILED  libraries: $(basename "$f") needs $missing (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"; status=1; }
done
step devices 60 "$BUILD/bin/oar" devices
grep -q "$DEVICE" "$OUT/devices.log" || { note "FAILED  devices: $DEVICE not listed"; status=1; }
step plugin_test 600 "$BUILD/tests/oar_${VENDOR}_plugin_test" --gtest_output="xml:$OUT/plugin_test.xml"
if grep -q '^\[  SKIPPED \] GpuDevice' "$OUT/plugin_test.log" 2>/dev/null; then
  note "FAILED  plugin_test: device tests were skipped on a GPU machine ($(grep -m1 "no $VENDOR device" "$OUT/plugin_test.log"))"
  status=1
fi
step gpu_kernels_host_test 120 "$BUILD/tests/oar_gpu_kernels_host_test"
if [[ "$VENDOR" == cuda ]]; then
  step check_device_code 60 plugins/gpu_common/check_device_code.sh cuda "$BUILD/lib/oar/plugins/liboar_plugin_cuda.so" "${CUDA_ARCHS//;/,}"
fi
step conformance 1800 "$BUILD/bin/oar" conformance --device "$DEVICE" --level "$LEVEL" --jobs "$JOBS" --report-dir "$OUT/conformance"

# Train each example on both devices with the same seed; the final metrics must agree.
for model in $MODELS; do
  var="STEPS_${model^^}"
  steps=${!var}
  for device in cpu:0 "$DEVICE"; do
    step "train_${model}_${device%%:*}" 1800 "$BUILD/bin/oar" train "$model" --device "$device" --steps "$steps" --seed 1
  done
  cpu=$(awk '/^final/ {print $3}' "$OUT/train_${model}_cpu.log" 2>/dev/null)
  gpu=$(awk '/^final/ {print $3}' "$OUT/train_${model}_${VENDOR}.log" 2>/dev/null)
  if [[ -n "$cpu" && -n "$gpu" ]]; then
    if awk -v a="$cpu" -v b="$gpu" -v t="$METRIC_TOLERANCE" \
         'BEGIN { d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a; exit !(d <= t * (s > 1e-12 ? s : 1)) }'; then
      note "OK      metric $model: cpu $cpu, $VENDOR $gpu (tolerance $METRIC_TOLERANCE relative)"
    else
      note "FAILED  metric $model: cpu $cpu, $VENDOR $gpu differ by more than $METRIC_TOLERANCE relative"
      status=1
    fi
  else
    note "FAILED  metric $model: no 'final' line from one of the runs"
    status=1
  fi
done

if [[ "${SKIP_BENCH:-0}" != 1 ]]; then
  [[ "$VENDOR" == cuda ]] && step gpu_bench 900 "$BUILD/bin/oar_gpu_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUT/gpu_bench.json" --benchmark_out_format=json
  [[ -x "$BUILD/bin/oar_bench" ]] && step oar_bench 900 "$BUILD/bin/oar_bench" "--benchmark_filter=^(dispatch|matmul)/"
fi

note "done: $(grep -c '^OK' "$summary") ok, $(grep -c '^FAILED' "$summary") failed"
exit $status
