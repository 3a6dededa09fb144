#!/usr/bin/env bash
# Set up, build and run the main job: list the devices, run the example computation on every device found
# (each checked against cpu), then train the MLP example on each simulated accelerator and on cpu, and
# profile a few CNN steps on ascend_sim.
set -euo pipefail
cd "$(dirname "$0")/.."

ci/install-deps.sh --level-zero
cmake --preset default > /dev/null
cmake --build --preset default

echo "== oar devices"
build/bin/oar devices
for device in $(build/bin/oar devices --json | sed -n 's/^ *"name": "\([a-z0-9_]*:[0-9]*\)",$/\1/p'); do
  echo "== device_demo --device $device"
  build/bin/device_demo --device "$device"
done

for device in kunlun_sim:0 ascend_sim:0 cpu:0; do
  echo "== oar train mlp --device $device"
  build/bin/oar train mlp --device "$device" --out "build/demo-checkpoints/mlp-${device%%:*}"
done
echo "== the checkpoint trained on kunlun_sim:0, evaluated on ascend_sim:1"
build/bin/oar eval --checkpoint build/demo-checkpoints/mlp-kunlun_sim --device ascend_sim:1
echo "== a few CNN steps on ascend_sim:0 with the per-op profile (simulated device time, NC1HWC0 kernels)"
build/bin/oar train cnn --device ascend_sim:0 --steps 20 --profile
