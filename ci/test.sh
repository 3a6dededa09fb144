#!/usr/bin/env bash
# Set up, build and run the whole test suite (the README's second quick-start command).
# Prints CTest's summary; exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

ci/install-deps.sh --level-zero

echo "== configure, build and test (cmake --workflow --preset default)"
cmake --workflow --preset default

echo "== install into a fresh prefix and run the installed oar with no environment"
prefix=$(mktemp -d /tmp/oar-install.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install build --prefix "$prefix" > /dev/null
env -u OAR_PLUGIN_PATH -u OAR_DEVICE "$prefix/bin/oar" devices | tee "$prefix/devices.txt"
grep -q "cpu:0" "$prefix/devices.txt" || { echo "installed oar does not list cpu:0"; exit 1; }
grep -q "$prefix/lib/oar/plugins/liboar_plugin_cpu.so" "$prefix/devices.txt" || {
  echo "installed oar did not load the installed cpu plugin"; exit 1; }
echo "installed layout OK"
