#!/usr/bin/env bash
# The static stack from the command line: oar train --static, oar export, oar predict (--describe, files,
# --repeat, every device) and the refusals of a damaged model folder. `static_cli_test.sh OAR`.
set -uo pipefail
oar=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/oar-static-cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/out.txt

run() {
  local want=$1
  shift
  echo "+ $*"
  "$@" > "$out" 2>&1
  local got=$?
  cat "$out"
  [[ $got == "$want" ]] || { echo "FAIL: exit status $got, expected $want"; exit 1; }
}
expect() { grep -qF -- "$1" "$out" || { echo "FAIL: output lacks: $1"; exit 1; }; }

# --static prints the same step lines as eager training.
run 0 "$oar" train mlp --steps 6 --log-every 1 --out "$work/ckpt"
grep '^step' "$out" > "$work/eager.txt"
run 0 "$oar" train mlp --steps 6 --log-every 1 --static
expect "static: 4 steps ran captured programs, 2 captured"
grep '^step' "$out" | diff "$work/eager.txt" - || { echo "FAIL: --static step lines differ from eager"; exit 1; }

# --profile / --trace with --static: the scheduler's profile and Chrome trace of the last step.
run 0 "$oar" train mlp --steps 4 --static --profile --trace "$work/train_trace.json" --device kunlun_sim:0
expect "profile of the last step (scheduler):"
expect "peak device memory: "
expect "trace of the last step written to $work/train_trace.json"
check_trace() {
  python3 - "$1" <<'PY' || { echo "FAIL: $1 is not a Chrome trace with complete events"; exit 1; }
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
assert any(e.get("ph") == "X" and e.get("dur", -1) >= 0 for e in events), events[:3]
PY
}
check_trace "$work/train_trace.json"
run 1 "$oar" train mlp --steps 4 --trace "$work/eager.json"
expect "--trace needs --static"
run 0 "$oar" export mlp --checkpoint "$work/ckpt" --out "$work/model"
expect "inputs x: float32[B, 2]"
run 0 "$oar" predict --model "$work/model" --describe
expect '"B"'
# A one-input model takes a one-tensor file whatever the tensor's name.
python3 - "$work/in.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"anything": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<6f", 0.1, -0.2, 0.3, 0.4, -0.5, 0.6))
PY
for device in cpu:0 kunlun_sim:0 ascend_sim:1; do
  run 0 "$oar" predict --model "$work/model" --device "$device" --input "$work/in.safetensors" \
    --output "$work/out_${device%%:*}.safetensors" --repeat 5
  expect "latency over 5 runs on $device: p50"
  expect "wrote 1 outputs"
done
run 0 "$oar" predict --model "$work/model" --device kunlun_sim:0 --input "$work/in.safetensors" --profile \
  --trace "$work/predict_trace.json"
expect "profile of one run on kunlun_sim:0:"
expect "peak device memory: "
expect "trace of one run written to $work/predict_trace.json"
check_trace "$work/predict_trace.json"
cmp "$work/out_cpu.safetensors" "$work/out_kunlun_sim.safetensors" > /dev/null ||
  echo "note: kunlun_sim's outputs differ from cpu's in the last bits (allowed)"

# Damaged folders are refused naming the file.
printf ' ' >> "$work/model/program.oir"
run 1 "$oar" predict --model "$work/model" --describe
expect "program.oir: checksum mismatch"
run 1 "$oar" predict --model "$work/nosuch" --describe
expect "no such folder"
echo "PASS: static_cli"
