#!/usr/bin/env bash
# `oar train llama --mesh MESH` against the one-device run:
#   mesh_train_test.sh OAR DEVICE MESH STEPS [LAUNCHER...]
# Every printed step line must equal the one-device run's within 1e-5 relative (float32), and there must
# be exactly STEPS of them (under a launcher only rank 0 prints). Without LAUNCHER the mesh's ranks are
# the devices of one process (four kunlun_sim devices); with one (mpirun ... -np 4) one process per rank.
# OAR_MESH_ARGS: more arguments for the mesh run (e.g. --schedule fthenb --micro-batches 4);
# OAR_MESH_EXACT=1: the step lines must be identical (where the math is the one device's, bitwise).
# OAR_MESH_EXPECT: an extended regular expression a line of the mesh run's output must match (e.g. its
# `collectives over N steps: ...` line). OAR_KUNLUN_SIM_DEVICES: the simulated devices (default 4).
# Prints PASS/FAIL.
set -uo pipefail
oar=$1
device=$2
mesh=$3
steps=$4
shift 4
launcher=("$@")
export OAR_KUNLUN_SIM_DEVICES=${OAR_KUNLUN_SIM_DEVICES:-4}
work=$(mktemp -d "${TMPDIR:-/tmp}/oar-mesh-train.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$oar" train llama --device "$device" --steps "$steps" --log-every 1 > "$work/one.txt" 2>&1 || {
  cat "$work/one.txt"; echo "FAIL: the one-device run failed"; exit 1; }
read -r -a extra <<< "${OAR_MESH_ARGS:-}"
"${launcher[@]}" "$oar" train llama --device "$device" --mesh "$mesh" --steps "$steps" --log-every 1 "${extra[@]}" \
  > "$work/mesh.txt" 2>&1 || {
  cat "$work/mesh.txt"; echo "FAIL: the --mesh $mesh run failed"; exit 1; }
grep '^step ' "$work/one.txt" > "$work/one.steps"
grep '^step ' "$work/mesh.txt" > "$work/mesh.steps"
paste -d' ' "$work/one.steps" "$work/mesh.steps"
n=$(wc -l < "$work/one.steps")
if [[ $n != "$steps" || $(wc -l < "$work/mesh.steps") != "$steps" ]]; then
  echo "FAIL: expected $steps step lines from each run"; exit 1
fi
paste -d' ' "$work/one.steps" "$work/mesh.steps" | awk '
  { a = $4; b = $8; d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a;
    if ($2 != $6 || d > 1e-5 * m) { print "FAIL: step " $2 ": " a " vs " b; bad = 1 } }
  END { exit bad }' || exit 1
if [[ ${OAR_MESH_EXACT:-0} == 1 ]] && ! cmp -s "$work/one.steps" "$work/mesh.steps"; then
  echo "FAIL: the step lines differ (expected identical)"; exit 1
fi
if [[ -n ${OAR_MESH_EXPECT:-} ]] && ! grep -Eq "$OAR_MESH_EXPECT" "$work/mesh.txt"; then
  grep '^collectives' "$work/mesh.txt"; echo "FAIL: no line of the --mesh $mesh run matches '$OAR_MESH_EXPECT'"; exit 1
fi
if [[ ${#launcher[@]} -eq 0 ]]; then
  grep -q "training llama on $mesh over $device:0\.\." "$work/mesh.txt" || { echo "FAIL: header"; exit 1; }
else
  [[ $(grep -c '^training ' "$work/mesh.txt") == 1 ]] || { echo "FAIL: more than one rank printed"; exit 1; }
fi
echo "PASS: $mesh"
