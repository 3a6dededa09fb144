#!/usr/bin/env bash
# Set up, build and run the whole test suite (the README's second quick-start command).
# Prints CTest's summary; exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's wall time, printed when the next one starts and at the end (CI's 45-minute budget).
step_start=$SECONDS step_name="install dependencies"
step() {
  echo "-- ${step_name}: $((SECONDS - step_start)) s (total $SECONDS s)"
  step_start=$SECONDS step_name=$1
}
trap 'echo "-- ${step_name}: $((SECONDS - step_start)) s (total $SECONDS s)"' EXIT

ci/install-deps.sh --level-zero

# The later steps' packages (clang for fuzzing, the HIP toolchain: ~1.3 GB) download while the main build
# compiles; the download changes nothing installed, and the steps below install from the cache.
mkdir -p build
ci/install-deps.sh --download-only --fuzz --hip > build/download-deps.log 2>&1 &
download_pid=$!

step "build and test"
echo "== configure, build and test (cmake --workflow --preset default)"
cmake --workflow --preset default
wait "$download_pid" || echo "(downloading the later steps' packages failed; they download when installed: build/download-deps.log)"
# Both installs at once: an image that cleans apt's cache after each dpkg run would otherwise drop the
# second set before it is installed.
step "install the later steps' packages"
ci/install-deps.sh --fuzz --hip

step "vendor plugins"
echo "== vendor plugins without their hardware: each loads and says why it has no devices"
build/bin/oar devices | tee build/devices.txt
for vendor in cuda level_zero; do
  if [[ -e build/lib/oar/plugins/liboar_plugin_${vendor}.so ]]; then
    grep -q "^  ${vendor} .* 0 devices — UNAVAILABLE: " build/devices.txt || {
      echo "the ${vendor} plugin did not load, or loaded without an UNAVAILABLE reason"; exit 1; }
  fi
done

step "fuzzing"
echo "== fuzzing, separate step (ci/fuzz.sh): the libFuzzer targets of fuzz/, built with clang + ASan + UBSan,"
echo "   20 s each over their committed seeds and reproducers (about 4 minutes on 2 cores)"
OAR_FUZZ_SECONDS=${OAR_FUZZ_SECONDS:-20} ci/fuzz.sh

step "hip"
echo "== optional backend, separate step: HIP (AMD/Hygon) — installs hipcc + libamdhip64-dev (~1.3 GB),"
echo "   builds the hip plugin from the shared CUDA/HIP kernel sources and runs its no-hardware tests"
ci/install-deps.sh --hip
cmake -S . -B build-hip -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -g1" \
  -DOAR_BUILD_CORE=OFF -DOAR_WITH_HIP=ON -DOAR_WITH_CUDA=OFF -DOAR_WITH_LEVEL_ZERO=OFF -DOAR_WITH_GPU_EMU=OFF > /dev/null
cmake --build build-hip -j "$(nproc)" --target oar_plugin_hip oar_hip_plugin_test oar_gpu_kernels_host_test
ctest --test-dir build-hip -R "Gpu|gpu|hip" --output-on-failure

step "installed layout"
echo "== install into a fresh prefix and run the installed oar with no environment"
prefix=$(mktemp -d /tmp/oar-install.XXXXXX)
trap 'rm -rf "$prefix"; echo "-- ${step_name}: $((SECONDS - step_start)) s (total $SECONDS s)"' EXIT
cmake --install build --prefix "$prefix" > /dev/null
env -u OAR_PLUGIN_PATH -u OAR_DEVICE "$prefix/bin/oar" devices | tee "$prefix/devices.txt"
grep -q "cpu:0" "$prefix/devices.txt" || { echo "installed oar does not list cpu:0"; exit 1; }
grep -q "$prefix/lib/oar/plugins/liboar_plugin_cpu.so" "$prefix/devices.txt" || {
  echo "installed oar did not load the installed cpu plugin"; exit 1; }
echo "installed layout OK"

step "out-of-tree application"
echo "== a model developer's application against the installed core only (find_package(Oar), relocated prefix)"
examples/standalone/out_of_tree.sh build kunlun_sim:1

step "sanitizers"
echo "== sanitizers, separate step (~20 min from scratch on 2 cores: ASan build ~11 min, TSan ~6 min, their tests ~2.5 min): asan = ASan+UBSan on the core, simulator"
echo "   and conformance unit tests; tsan = ThreadSanitizer on the runtime, simulator and distributed tests"
ci/sanitizers.sh asan tsan
