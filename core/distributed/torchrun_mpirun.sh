#!/usr/bin/env bash
# Start a torchrun-style job with OpenMPI's mpirun as the process starter only (the tests' launcher):
#   torchrun_mpirun.sh MPIRUN [MPIRUN_FLAGS...] NPROC -- COMMAND [ARGS...]
# picks a free MASTER_PORT on 127.0.0.1 (unless MASTER_PORT is set) and runs every rank through
# torchrun_env.sh, which turns mpirun's variables into RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
set -euo pipefail
launcher=()
while [[ $# -gt 0 && $1 != -- ]]; do launcher+=("$1"); shift; done
[[ $# -gt 1 ]] || { echo "usage: torchrun_mpirun.sh MPIRUN... NPROC -- COMMAND..." >&2; exit 2; }
shift
export MASTER_ADDR=127.0.0.1
if [[ -z ${MASTER_PORT:-} ]]; then
  MASTER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
export MASTER_PORT
exec "${launcher[@]}" "$(dirname "$0")/torchrun_env.sh" "$@"
