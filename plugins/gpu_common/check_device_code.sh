#!/usr/bin/env bash
# Check that each GPU plugin embeds device code of the shared kernels for every configured architecture.
# Usage: check_device_code.sh VENDOR LIB ARCHS [VENDOR LIB ARCHS]...   (ARCHS: comma-separated)
#   cuda: the CUDA ELF images (e_machine 190) in the fat binary; e_flags bits 8-15 are the SM version.
#   hip:  the clang offload bundle names each gfx target.
set -euo pipefail

cuda_archs() {  # the SM versions of the cubins inside $1, one per line
  python3 - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], 'rb').read()
i, seen = -1, set()
while True:
    i = data.find(b'\x7fELF', i + 1)
    if i < 0:
        break
    if data[i + 4] == 2 and struct.unpack_from('<H', data, i + 18)[0] == 190:
        seen.add((struct.unpack_from('<I', data, i + 48)[0] >> 8) & 0xff)
for sm in sorted(seen):
    print(sm)
PY
}

status=0
while [[ $# -ge 3 ]]; do
  vendor=$1 lib=$2 archs=$3
  shift 3
  case $vendor in
    cuda) present=$(cuda_archs "$lib") ;;
    hip) present=$(grep -a -o -- 'amdgcn-amd-amdhsa--gfx[0-9a-f]*' "$lib" | sed 's/.*--//' | sort -u) ;;
    *) echo "unknown vendor $vendor"; exit 2 ;;
  esac
  IFS=',' read -r -a wanted <<< "$archs"
  for arch in "${wanted[@]}"; do
    if grep -qx -- "$arch" <<< "$present"; then
      echo "ok   $vendor $(basename "$lib") has device code for $arch"
    else
      echo "FAIL $vendor $(basename "$lib") has no device code for $arch (found: $(echo $present))"
      status=1
    fi
  done
done
exit $status
