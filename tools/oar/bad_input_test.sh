#!/usr/bin/env bash
# Bad input to `oar`: one case per call (`bad_input_test.sh OAR CASE`), each a regression test for an
# input that once crashed, was silently ignored, or gave "internal error". Prints what it ran and why it
# failed; exits non-zero on failure.
set -uo pipefail
oar=$1
case_name=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/oar-bad-input.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/out.txt

# run EXPECTED_EXIT CMD...: run CMD, capture its output, check its exit status.
run() {
  local want=$1
  shift
  echo "+ $*"
  "$@" > "$out" 2>&1
  local got=$?
  cat "$out"
  if [[ $got != "$want" ]]; then
    echo "FAIL: exit status $got, expected $want"
    exit 1
  fi
}
# expect TEXT: the last run's output contains TEXT.
expect() {
  grep -qF -- "$1" "$out" || { echo "FAIL: output lacks: $1"; exit 1; }
}

case $case_name in
  oar_device_precedence)
    # --device wins over OAR_DEVICE, and a bad OAR_DEVICE breaks nothing that does not use it.
    run 0 env OAR_DEVICE=nosuch:0 "$oar" train mlp --steps 1 --device cpu:0 --out "$work/ckpt"
    expect "training mlp on cpu:0"
    run 0 env OAR_DEVICE=nosuch:0 "$oar" eval --checkpoint "$work/ckpt" --device cpu:0
    run 0 env OAR_DEVICE=nosuch:0 "$oar" train llama --steps 1 --device cpu:0 --out "$work/llama"
    run 0 env OAR_DEVICE=nosuch:0 "$oar" generate --checkpoint "$work/llama" --device cpu:0 --prompt a \
      --max-new-tokens 2
    # Without --device, OAR_DEVICE is used ...
    run 0 env OAR_DEVICE=kunlun_sim:0 "$oar" train mlp --steps 1
    expect "training mlp on kunlun_sim:0"
    run 0 env OAR_DEVICE=kunlun_sim:0 "$oar" eval --checkpoint "$work/ckpt"
    expect "on kunlun_sim:0"
    # ... and a bad value is an error only then, naming the variable.
    run 1 env OAR_DEVICE=nosuch:0 "$oar" train mlp --steps 1
    expect "OAR_DEVICE='nosuch:0'"
    # Neither: cpu:0.
    run 0 env -u OAR_DEVICE "$oar" train mlp --steps 1
    expect "training mlp on cpu:0"
    ;;
  steps_must_be_positive)
    run 1 "$oar" train mlp --steps -5
    expect "--steps must be a positive integer, got -5"
    run 1 "$oar" train mlp --steps 0
    expect "--steps must be a positive integer, got 0"
    ;;
  fault_spec_typos)
    run 1 env OAR_SIM_FAULTS=launch:op=nosuchop "$oar" train mlp --steps 1 --device kunlun_sim:0
    expect "op='nosuchop' is not the name of an op"
    run 1 env OAR_SIM_FAULTS=alloc:plugin=kunlun "$oar" train mlp --steps 1 --device ascend_sim:0
    expect "plugin='kunlun' is not a simulator name"
    ;;
  devices_json_non_utf8)
    # A plugin path that is not UTF-8 used to end `oar devices --json` with "internal error".
    bad=$(printf '%s/lib\377oar.so' "$work")
    run 0 "$oar" --plugin "$bad" devices --json
    expect '"path": "'"$work"'/lib\\xFFoar.so"'
    ;;
  deep_nesting_in_weights)
    # A well-formed header nesting 100,000 arrays deep used to overflow the stack (exit 139) when the
    # error message quoted it.
    run 0 "$oar" train mlp --steps 1 --out "$work/ckpt"
    deep_open=$(head -c 100000 /dev/zero | tr '\0' '[')
    deep_close=$(head -c 100000 /dev/zero | tr '\0' ']')
    header="{\"w\":{\"dtype\":\"F32\",\"shape\":${deep_open}${deep_close},\"data_offsets\":[0,4]}}"
    n=${#header}
    {
      for i in 0 1 2 3 4 5 6 7; do printf "\\$(printf '%03o' $(((n >> (8 * i)) & 255)))"; done
      printf '%s' "$header"
      printf '\0\0\0\0'
    } > "$work/ckpt/model.safetensors"
    run 1 "$oar" eval --checkpoint "$work/ckpt"
    expect "nest deeper than"
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
echo "PASS: $case_name"
