#!/usr/bin/env bash
# Pack what ci/gpu-check.sh runs into one folder that travels to a GPU machine, so that a short GPU lease
# is spent on the checks rather than on a build — and so that the check runs at all on a machine that has
# the CUDA toolkit and driver but none of our Debian build dependencies (oneDNN, fmt, GoogleTest, …).
#
#   ci/gpu-bundle.sh [BUILD] [BUNDLE]     default: build (a build with OAR_WITH_CUDA=ON), gpu-bundle
#
# Writes the folder BUNDLE and BUNDLE.tar.xz (what a device call carries: oneDNN alone is 40 MB unpacked).
#
# The bundle mirrors a build tree (bin/, lib/oar/plugins/, tests/, share/oar/conformance/) and adds
# lib/deps/: every shared library the programs need except glibc, the GCC runtime and the CUDA libraries
# (those must come from the GPU machine: the driver's libcuda and the toolkit's cudart/cuBLAS/NVRTC/NCCL).
# On the GPU machine, from the repository root:
#
#   tar xJf gpu-bundle.tar.xz && VENDOR=cuda SKIP_BUILD=1 BUILD=gpu-bundle ci/gpu-check.sh
#
# (gpu-check.sh puts lib/deps on LD_LIBRARY_PATH when it finds it, and names any library still missing.)
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
bundle=${2:-gpu-bundle}
programs=(bin/oar bin/oar_gpu_bench tests/oar_cuda_plugin_test tests/oar_gpu_kernels_host_test
          lib/oar/plugins/liboar_plugin_cpu.so lib/oar/plugins/liboar_plugin_cuda.so)
for p in "${programs[@]}"; do
  [[ -e "$build/$p" ]] || { echo "gpu-bundle: $build/$p is missing (build with OAR_WITH_CUDA=ON first)" >&2; exit 1; }
done

rm -rf "$bundle"
mkdir -p "$bundle/lib/deps" "$bundle/share/oar/conformance"
for p in "${programs[@]}"; do
  mkdir -p "$bundle/$(dirname "$p")"
  cp "$build/$p" "$bundle/$p"
  strip --strip-debug "$bundle/$p"
done
cp conformance/tolerances.json "$bundle/share/oar/conformance/"  # where an installed runner looks

# Shared libraries, resolved here; the system's and the vendor's are left to the GPU machine.
keep_out='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+\.|libgcc_s\.|libcuda\.|libcudart\.|libcublas|libnvrtc|libnccl\.|libcudadevrt)'
for p in "${programs[@]}"; do
  ldd "$build/$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $keep_out ]] && continue
  cp -L "$path" "$bundle/lib/deps/$name"
done
strip --strip-debug "$bundle"/lib/deps/* 2>/dev/null || true

tar -C "$(dirname "$bundle")" -cJf "$bundle.tar.xz" "$(basename "$bundle")"
size=$(du -sm "$bundle" | cut -f1)
packed=$(du -sm "$bundle.tar.xz" | cut -f1)
echo "gpu-bundle: $bundle (${size} MiB, $(ls "$bundle/lib/deps" | wc -l) libraries in lib/deps), $bundle.tar.xz ${packed} MiB"
if (( packed > 40 )); then  # a device call carries 64 MiB, the working tree included
  echo "gpu-bundle: $bundle.tar.xz is over 40 MiB, too much for one device call" >&2
  exit 1
fi
