#!/usr/bin/env bash
# `oar train llama --mesh MESH` against the one-device run: `mesh_train_test.sh OAR MESH STEPS`. Every
# printed step line must equal the one-device run's within 1e-5 relative (float32). Four kunlun_sim
# devices in one process. Prints PASS/FAIL.
set -uo pipefail
oar=$1
mesh=$2
steps=$3
export OAR_KUNLUN_SIM_DEVICES=4
work=$(mktemp -d "${TMPDIR:-/tmp}/oar-mesh-train.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$oar" train llama --device kunlun_sim --steps "$steps" --log-every 1 > "$work/one.txt" 2>&1 || {
  cat "$work/one.txt"; echo "FAIL: the one-device run failed"; exit 1; }
"$oar" train llama --device kunlun_sim --mesh "$mesh" --steps "$steps" --log-every 1 > "$work/mesh.txt" 2>&1 || {
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
grep -q "training llama on $mesh over kunlun_sim:0..3" "$work/mesh.txt" || { echo "FAIL: header"; exit 1; }
echo "PASS: $mesh"
