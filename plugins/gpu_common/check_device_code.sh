#!/usr/bin/env bash
# Check that each GPU plugin embeds device code of the shared kernels for every configured architecture.
# Usage: check_device_code.sh VENDOR LIB "ARCH;ARCH" [VENDOR LIB ARCHS]...
#   cuda: cuobjdump lists an ELF per sm_XX;  hip: the clang offload bundle names each gfx target.
set -euo pipefail
status=0
while [[ $# -ge 3 ]]; do
  vendor=$1 lib=$2 archs=$3
  shift 3
  IFS=';' read -r -a list <<< "$archs"
  for arch in "${list[@]}"; do
    case $vendor in
      cuda)
        cuobjdump=${CUDA_CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
        if [[ ! -x "$cuobjdump" ]]; then  # toolkits without cuobjdump: at least the fat binary is there
          if readelf -S "$lib" | grep -q '\.nv_fatbin'; then
            echo "ok   $vendor $lib has a .nv_fatbin section (no cuobjdump to list sm_${arch})"
          else
            echo "FAIL $vendor $lib has no .nv_fatbin section"; status=1
          fi
          continue
        fi
        if "$cuobjdump" --list-elf "$lib" 2>/dev/null | grep -q "sm_${arch}\b"; then
          echo "ok   $vendor $lib has SASS for sm_${arch}"
        else
          echo "FAIL $vendor $lib has no SASS for sm_${arch}"; status=1
        fi ;;
      hip)
        if grep -a -q -- "amdgcn-amd-amdhsa--${arch}" "$lib"; then
          echo "ok   $vendor $lib has a code object for ${arch}"
        else
          echo "FAIL $vendor $lib has no code object for ${arch}"; status=1
        fi ;;
      *) echo "unknown vendor $vendor"; exit 2 ;;
    esac
  done
done
exit $status
