#!/usr/bin/env bash
# Install what Oar needs to build and test on Debian 12 (idempotent: nothing happens when all is there).
#   ci/install-deps.sh            core toolchain and libraries
#   ci/install-deps.sh --bench    also libtorch-dev, the peer the benchmarks compare against
#   ci/install-deps.sh --level-zero
#                                 also the level_zero plugin's build and test tools: the Level Zero loader
#                                 (libze-dev), clang-15 + llvm-spirv-15 (OpenCL C -> SPIR-V at build time),
#                                 spirv-tools (spirv-val test) and pocl-opencl-icd (runs the kernels on the CPU)
#   ci/install-deps.sh --hip      also the AMD HIP toolchain for the hip plugin (hipcc, libamdhip64-dev;
#                                 ~1.3 GB with clang-15). CUDA is not installed from apt: our machines
#                                 have it preinstalled under /usr/local/cuda.
#   ci/install-deps.sh --fuzz     also clang and its libFuzzer/sanitizer runtimes (ci/fuzz.sh)
#   ci/install-deps.sh --download-only --hip ...
#                                 only fetch the missing packages into apt's cache, changing nothing installed
#                                 (ci/test.sh runs this beside the main build, so the later install only unpacks)
# Options combine (ci/install-deps.sh --bench --level-zero --hip).
set -euo pipefail

download_only=0
packages=(
  cmake ninja-build g++ pkg-config binutils coreutils
  libboost-dev libboost-context-dev libfmt-dev nlohmann-json3-dev libcli11-dev libdlpack-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-headers libssl-dev libffi-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  llvm-15-tools python3
  openmpi-bin libopenmpi-dev libgloo-dev
)
for option in "$@"; do
  case "$option" in
    --bench) packages+=(libtorch-dev) ;;
    --level-zero) packages+=(libze-dev clang-15 llvm-spirv-15 spirv-tools pocl-opencl-icd) ;;
    --hip) packages+=(hipcc libamdhip64-dev) ;;
    --fuzz) packages+=(clang libclang-rt-14-dev) ;;
    --download-only) download_only=1 ;;
    *) echo "install-deps: unknown option $option (known: --bench, --level-zero, --hip, --fuzz, --download-only)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
if [[ $download_only -eq 1 ]]; then
  # The package lists of the install that ran just before are used as they are (no update: it would race
  # with nothing, but costs time); a failure here only means the later install downloads itself.
  echo "install-deps: downloading ${missing[*]}"
  $SUDO apt-get install -y -qq --download-only --no-install-recommends "${missing[@]}"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
