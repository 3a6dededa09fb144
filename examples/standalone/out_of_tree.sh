#!/usr/bin/env bash
# Model developer's check: build an application (the device demo) the way a user of Oar does — against an
# installed, relocated prefix and nothing else — run it on a device chosen by name, and check that it used
# the installed core libraries and plugins.
#
# Usage: out_of_tree.sh BUILD_DIR [DEVICE]
#   BUILD_DIR  a configured and built Oar build tree (it is installed into a temporary prefix)
#   DEVICE     the device to run on (default kunlun_sim:1: a plugin other than cpu, not device 0)
# Steps:
#   1. cmake --install BUILD_DIR into a temporary folder, then move that folder (the prefix must be
#      relocatable: nothing may remember where it was installed)
#   2. copy examples/device_demo.cc and examples/standalone/CMakeLists.txt to a temporary folder, configure
#      with -DCMAKE_PREFIX_PATH=<moved prefix> only, build, and check that every core header it compiled
#      against came from <prefix>/include/oar (Ninja's dependency log) and find_package found <prefix>
#   3. every liboar_* library the program loads resolves under <prefix>/lib (ldd); the installed libraries
#      and programs carry only $ORIGIN-relative run paths
#   4. run it with --device DEVICE and no OAR_PLUGIN_PATH: it reports that device, "check: OK", and the
#      runtime's log shows the plugin loaded from <prefix>/lib/oar/plugins
#   5. the installed `oar devices` runs from the moved prefix and lists the installed plugins
# Exit status: 0 passed, 1 failed, 77 skipped (a tool the check needs is missing; the message says which).
# Temporary folders are removed at exit; set OAR_KEEP_TMP=1 to keep them.
set -uo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd) || exit 2
device=${2:-kunlun_sim:1}
examples_dir=$(cd "$(dirname "$0")/.." && pwd)

for tool in cmake ninja ldd readelf; do
  command -v "$tool" > /dev/null || { echo "SKIP: '$tool' is not installed"; exit 77; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/oar-app.XXXXXX")
cleanup() {
  if [[ ${OAR_KEEP_TMP:-0} == 1 ]]; then echo "kept: $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

step() { echo; echo "== $*"; }
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run quietly; on failure show the output and fail with the message
  local log=$tmp/last.log what=$1
  shift
  "$@" > "$log" 2>&1 || { cat "$log"; fail "$what"; }
}

# A user's machine knows nothing of this source tree: no inherited search paths.
unset CMAKE_PREFIX_PATH Oar_DIR Oar_ROOT OarSDK_DIR OarSDK_ROOT CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH \
      LIBRARY_PATH LD_LIBRARY_PATH OAR_PLUGIN_PATH OAR_DEVICE OAR_STRICT_DEVICE

step "1. install $build_dir, then move the prefix"
run "cmake --install failed" cmake --install "$build_dir" --prefix "$tmp/installed-here"
mv "$tmp/installed-here" "$tmp/prefix"
prefix=$tmp/prefix
for f in lib/cmake/Oar/OarConfig.cmake lib/cmake/Oar/OarConfigVersion.cmake lib/cmake/Oar/OarTargets.cmake \
         lib/liboar_runtime.so include/oar/core/ops/ops.h include/oar/core/tensor/tensor.h \
         include/oar/plugin/plugin.h lib/oar/plugins/liboar_plugin_cpu.so; do
  [[ -e $prefix/$f ]] || fail "the install has no $f"
done
if grep -rqF -e "$tmp/installed-here" -e "$build_dir" "$prefix/lib/cmake"; then
  fail "the installed CMake packages name the install or build folder: $(grep -rlF -e "$tmp/installed-here" \
       -e "$build_dir" "$prefix/lib/cmake")"
fi
echo "ok   installed and moved to $prefix"

step "2. build the device demo against $prefix only"
mkdir -p "$tmp/app/standalone"
cp "$examples_dir/device_demo.cc" "$tmp/app/"
cp "$examples_dir/standalone/CMakeLists.txt" "$tmp/app/standalone/"
run "configuring the application failed" \
  cmake -S "$tmp/app/standalone" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
        -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
oar_dir=$(sed -n 's/^Oar_DIR:PATH=//p' "$tmp/build/CMakeCache.txt")
[[ $oar_dir == "$prefix"/* ]] || fail "find_package(Oar) found '$oar_dir', not the package under $prefix"
echo "ok   Oar_DIR=$oar_dir"
run "building the application failed" cmake --build "$tmp/build"
app=$tmp/build/device_demo
[[ -x $app ]] || fail "the build produced no device_demo"
headers=$(ninja -C "$tmp/build" -t deps | grep -E '/(core|oar/plugin)/' | sed 's/^ *//' | sort -u)
[[ -n $headers ]] || fail "ninja recorded no core headers for the application"
outside=$(grep -v "^$prefix/include/oar/" <<< "$headers" || true)
[[ -z $outside ]] || fail "the application compiled against headers outside $prefix: $outside"
echo "ok   $(wc -l <<< "$headers") Oar headers, all from $prefix/include/oar"

step "3. libraries and run paths"
libs=$(ldd "$app" | grep 'liboar_')
echo "$libs"
[[ -n $libs ]] || fail "the application links no liboar_* library (is the core still static?)"
wrong=$(grep -v "=> $prefix/lib/liboar_" <<< "$libs" || true)
[[ -z $wrong ]] || fail "liboar_* libraries not resolved from $prefix/lib: $wrong"
for f in "$prefix"/lib/liboar_*.so "$prefix/bin/oar" "$prefix/bin/oar-conformance"; do
  [[ -L $f ]] && continue
  runpath=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p; s/.*(RPATH).*\[\(.*\)\]/\1/p')
  [[ $runpath == '$ORIGIN' || $runpath == '$ORIGIN/../lib' ]] ||
    fail "$f has run path '$runpath' (want \$ORIGIN or \$ORIGIN/../lib)"
done
echo "ok   liboar_* from $prefix/lib; installed run paths are \$ORIGIN-relative"

step "4. device_demo --device $device (no OAR_PLUGIN_PATH)"
out=$(OAR_LOG_LEVEL=debug "$app" --device "$device" 2>&1)
status=$?
grep -v '^\[oar:debug\]' <<< "$out"
[[ $status -eq 0 ]] || { echo "$out"; fail "device_demo exited with $status"; }
grep -q "^device $device\$" <<< "$out" || fail "device_demo did not run on $device"
grep -q "^check: OK" <<< "$out" || fail "device_demo did not print 'check: OK'"
type=${device%%:*}
plugin=$prefix/lib/oar/plugins/liboar_plugin_$type.so
grep -F "plugin '$type' from " <<< "$out" | grep -qF "$plugin" || {
  grep -F "plugin " <<< "$out"
  fail "the '$type' plugin was not loaded from $plugin"
}
echo "ok   ran on $device with $plugin"

step "5. the installed oar from the moved prefix"
devices=$("$prefix/bin/oar" devices 2>&1) || { echo "$devices"; fail "oar devices failed"; }
grep -qF "$plugin" <<< "$devices" || { echo "$devices"; fail "installed oar did not load $plugin"; }
echo "ok   oar devices lists $type from $prefix"

echo
echo "PASS: an application built against the relocated install only ran on $device with the installed plugins"
