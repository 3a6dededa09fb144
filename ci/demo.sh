#!/usr/bin/env bash
# Set up, build and run the main job: list the devices, then run the example computation on the default
# device (OAR_DEVICE, else cpu:0) and on every other device found, each checked against cpu.
set -euo pipefail
cd "$(dirname "$0")/.."

ci/install-deps.sh
cmake --preset default > /dev/null
cmake --build --preset default

echo "== oar devices"
build/bin/oar devices
for device in $(build/bin/oar devices --json | sed -n 's/^ *"name": "\([a-z0-9_]*:[0-9]*\)",$/\1/p'); do
  echo "== device_demo --device $device"
  build/bin/device_demo --device "$device"
done
