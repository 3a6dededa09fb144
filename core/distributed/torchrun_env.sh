#!/usr/bin/env bash
# One rank of a torchrun-style job, with OpenMPI's mpirun used only to start the processes (tests; on a
# cluster torchrun or a Slurm wrapper sets these variables itself):
#   MASTER_PORT=29500 mpirun ... -np 4 torchrun_env.sh COMMAND [ARGS...]
# Sets RANK, WORLD_SIZE and LOCAL_RANK from mpirun's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}, MASTER_ADDR
# (default 127.0.0.1) and requires MASTER_PORT; then removes every OMPI_* and PMIX_* variable, so the command
# sees a torchrun-style launch and not an MPI job (Oar's process group then uses Gloo over the TCP store, and
# MPI is never initialised), and runs the command in this process.
set -euo pipefail
: "${OMPI_COMM_WORLD_RANK:?torchrun_env.sh runs under mpirun}"
: "${MASTER_PORT:?set MASTER_PORT (a free TCP port on MASTER_ADDR) for every rank}"
export RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOCAL_RANK=${OMPI_COMM_WORLD_LOCAL_RANK:-0}
export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT
while IFS='=' read -r name _; do
  case $name in OMPI_* | PMIX_*) unset "$name" ;; esac
done < <(env)
exec "$@"
