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

# --static --cinn: the captured steps fused and compiled; --cinn alone is refused.
run 0 "$oar" train mlp --steps 6 --log-every 1 --static --cinn --device kunlun_sim:0
expect "cinn: "
expect " 0 unfused, 0 interpreted"
run 1 "$oar" train mlp --steps 2 --cinn
expect "--cinn needs --static"

# An eager --profile ends with the last step's peak device memory too, so the two compare.
run 0 "$oar" train mlp --steps 3 --profile
grep -qE '^peak device memory: [0-9]+ bytes on cpu:0$' "$out" || { echo "FAIL: no peak device memory line"; exit 1; }

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
  # With CINN the same outputs within float rounding.
  run 0 "$oar" predict --model "$work/model" --device "$device" --input "$work/in.safetensors" \
    --output "$work/cinn_${device%%:*}.safetensors" --cinn
  python3 - "$work/out_${device%%:*}.safetensors" "$work/cinn_${device%%:*}.safetensors" <<'PY' || {
import json, struct, sys
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: struct.unpack(f"<{(v['data_offsets'][1] - v['data_offsets'][0]) // 4}f",
                             b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
a, c = read(sys.argv[1]), read(sys.argv[2])
assert a.keys() == c.keys() and all(abs(x - y) <= 1e-5 * (1 + abs(x)) for k in a for x, y in zip(a[k], c[k])), (a, c)
PY
    echo "FAIL: oar predict --cinn on $device differs from oar predict"; exit 1; }
done
run 0 "$oar" predict --model "$work/model" --device kunlun_sim:0 --input "$work/in.safetensors" --profile \
  --trace "$work/predict_trace.json"
expect "profile of one run on kunlun_sim:0:"
expect "peak device memory: "
expect "trace of one run written to $work/predict_trace.json"
check_trace "$work/predict_trace.json"
cmp "$work/out_cpu.safetensors" "$work/out_kunlun_sim.safetensors" > /dev/null ||
  echo "note: kunlun_sim's outputs differ from cpu's in the last bits (allowed)"

# Llama generation through the Predictor: oar export llama --decode, then oar generate --model gives the
# text of eager oar generate --checkpoint.
run 0 "$oar" train llama --steps 2 --out "$work/llama"
run 0 "$oar" export llama --checkpoint "$work/llama" --out "$work/decode" --decode --max-positions 64
expect "past.0.k: float32[B, 4, L, 16]"
run 0 "$oar" generate --checkpoint "$work/llama" --prompt "The " --max-new-tokens 20
cp "$out" "$work/eager_text.txt"
for device in cpu:0 kunlun_sim:0; do
  run 0 "$oar" generate --model "$work/decode" --prompt "The " --max-new-tokens 20 --device "$device"
  diff "$work/eager_text.txt" "$out" || { echo "FAIL: oar generate --model on $device differs from eager"; exit 1; }
done
run 1 "$oar" generate --model "$work/decode" --prompt "The " --max-new-tokens 100
expect "--max-positions"
run 1 "$oar" generate --model "$work/model" --prompt "The "
expect "oar export llama --decode"
run 0 "$oar" export llama --checkpoint "$work/llama" --out "$work/seq" --batch 1 --symbolic-seq
expect "ids: int64[1, T], positions: int64[T]"
run 1 "$oar" export llama --checkpoint "$work/llama" --out "$work/nope" --symbolic-seq
expect "needs a static batch"
run 1 "$oar" export mlp --checkpoint "$work/ckpt" --out "$work/nope" --decode
expect "only llama has a decoding step"

# Damaged folders are refused naming the file.
printf ' ' >> "$work/model/program.oir"
run 1 "$oar" predict --model "$work/model" --describe
expect "program.oir: checksum mismatch"
run 1 "$oar" predict --model "$work/nosuch" --describe
expect "no such folder"
echo "PASS: static_cli"
