#!/usr/bin/env bash
# Install what Oar needs to build and test on Debian 12 (idempotent: nothing happens when all is there).
#   ci/install-deps.sh            core toolchain and libraries
#   ci/install-deps.sh --bench    also libtorch-dev, the peer the benchmarks compare against
#   ci/install-deps.sh --hip      also the AMD HIP toolchain for the hip plugin (hipcc, libamdhip64-dev;
#                                 ~1.3 GB with clang-15). CUDA is not installed from apt: our machines
#                                 have it preinstalled under /usr/local/cuda.
# Flags combine: ci/install-deps.sh --bench --hip
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config binutils coreutils
  libboost-dev libfmt-dev nlohmann-json3-dev libcli11-dev libdlpack-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-headers libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)
for flag in "$@"; do
  case "$flag" in
    --bench) packages+=(libtorch-dev) ;;
    --hip) packages+=(hipcc libamdhip64-dev) ;;
    *) echo "install-deps: unknown flag $flag (expected --bench, --hip)" >&2; exit 2 ;;
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
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
