#!/usr/bin/env bash
# CI step: the sanitizer builds. Each preset is configured in its own build folder (build-asan, build-tsan),
# builds only the test programs of its subset, and runs them through its CTest preset (which sets the
# sanitizer options: CMakePresets.json). Any sanitizer report fails the test that produced it.
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer): the core, simulator and
#         conformance unit tests
#   tsan  ThreadSanitizer: the runtime, scheduler, simulator and distributed tests (streams, simulator worker
#         threads, concurrent runs of one compiled program, in-process collectives); host kernels run on one
#         OpenMP thread there (OMP_NUM_THREADS=1 in the preset: libgomp is not instrumented, docs/sanitizers.md)
# The subsets are sized so that both presets, built from scratch on CI's 2 cores, take about 15 minutes
# (measured: docs/sanitizers.md). Suppressions, each with its reason: cmake/lsan.supp, cmake/tsan.supp.
#
# Usage: ci/sanitizers.sh [asan] [tsan]   (default: both). JOBS=N overrides the build parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${JOBS:-$(nproc)}
presets=("$@")
[[ ${#presets[@]} -gt 0 ]] || presets=(asan tsan)

# No GPU toolchains: their plugins have no hardware to run on here, and gpu_emu switches stacks with
# Boost.Context, which neither sanitizer follows without annotations.
configure_flags=(-DOAR_WITH_CUDA=OFF -DOAR_WITH_HIP=OFF -DOAR_WITH_LEVEL_ZERO=OFF -DOAR_WITH_GPU_EMU=OFF
                 -DOAR_BUILD_BENCHMARKS=OFF)

# The test programs of each subset (CTest label = program name: cmake/OarTesting.cmake).
asan_programs=(
  oar_base_test oar_tensor_test oar_runtime_test oar_ops_test oar_format_test oar_autograd_test oar_nn_test
  oar_optim_test oar_distributed_test
  oar_sim_unit_test oar_sim_device_test oar_sim_fault_test oar_kunlun_sim_test oar_ascend_sim_test
  oar_ascend_sim_precision_test oar_sim_core_test oar_sim_core_fault_test
  oar_reference_test
  oar_ir_test oar_passes_test oar_jit_test oar_inference_test oar_op_semantics_test
  oar_runtime_compiler_test oar_compiler_test
)
tsan_programs=(
  oar_runtime_test
  oar_sim_unit_test oar_sim_device_test oar_sim_fault_test oar_kunlun_sim_test oar_ascend_sim_test
  oar_sim_core_test
  oar_distributed_test
  oar_inference_test
  oar_scheduler_test
)

for preset in "${presets[@]}"; do
  case "$preset" in
    asan) programs=("${asan_programs[@]}") ;;
    tsan) programs=("${tsan_programs[@]}") ;;
    *) echo "sanitizers: unknown preset '$preset' (known: asan, tsan)" >&2; exit 2 ;;
  esac
  start=$SECONDS
  echo "== $preset: configure (cmake --preset $preset)"
  mkdir -p "build-$preset"
  cmake --preset "$preset" "${configure_flags[@]}" > "build-$preset/configure.log" ||
    { cat "build-$preset/configure.log"; exit 1; }
  echo "== $preset: build ${#programs[@]} test programs (-j $jobs)"
  cmake --build "build-$preset" -j "$jobs" --target "${programs[@]}"
  built=$SECONDS
  labels="^($(IFS='|'; echo "${programs[*]}"))\$"
  echo "== $preset: run them (ctest --preset $preset -L '$labels')"
  ctest --preset "$preset" -L "$labels" -j "$jobs" --no-tests=error
  echo "== $preset: OK (build $((built - start)) s, tests $((SECONDS - built)) s)"
done
