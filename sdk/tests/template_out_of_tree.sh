#!/usr/bin/env bash
# Out-of-tree vendor check: build sdk/template the way a vendor does — against an installed Oar and nothing
# else — then load it with the installed `oar` and certify it at level L2 (training).
#
# Usage: template_out_of_tree.sh BUILD_DIR TEMPLATE_DIR
#   BUILD_DIR     a configured and built Oar build tree (it is installed into a temporary prefix)
#   TEMPLATE_DIR  sdk/template (only copied; nothing else of the source tree is used)
# Steps:
#   1. cmake --install BUILD_DIR --prefix $prefix (a fresh temporary folder)
#   2. copy the template to a temporary folder, configure it with -DCMAKE_PREFIX_PATH=$prefix only (package
#      registries and include-path variables off), build it, and check from the compiler's dependency
#      records that every oar/plugin header it used came from $prefix
#   3. nm -D --defined-only: the plugin exports exactly oar_plugin_get_api
#   4. OAR_PLUGIN_PATH=<plugin> $prefix/bin/oar devices lists template_device:0
#   5. a C99 program including oar/plugin/plugin.h compiles with `pkg-config --cflags oar-plugin-sdk`
#      (PKG_CONFIG_PATH=$prefix/lib/pkgconfig), against the headers under $prefix, and runs
#   6. $prefix/bin/oar conformance --plugin <plugin> --level L2 --jobs 2 --report-dir <tmp> exits 0 with
#      "L0 PASS, L1 PASS [...], L2 PASS [...]": the minimums met, not PARTIAL (README, "What each level needs")
# Steps 1-4 stop at the first failure; 5 and 6 both run and are reported together.
# Exit status: 0 passed, 1 failed, 77 skipped (a tool the check needs is missing; the message says which).
# Temporary folders are removed at exit; set OAR_KEEP_TMP=1 to keep them for debugging.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd) || exit 2
template_dir=$(cd "$2" && pwd) || exit 2
[[ -f $template_dir/CMakeLists.txt ]] || { echo "FAIL: $template_dir has no CMakeLists.txt" >&2; exit 1; }

for tool in cmake nm pkg-config cc; do
  command -v "$tool" > /dev/null || { echo "SKIP: '$tool' is not installed"; exit 77; }
done

prefix=$(mktemp -d "${TMPDIR:-/tmp}/oar-prefix.XXXXXX")
work=$(mktemp -d "${TMPDIR:-/tmp}/oar-vendor.XXXXXX")
cleanup() {
  if [[ ${OAR_KEEP_TMP:-0} == 1 ]]; then
    echo "kept: prefix $prefix, work $work"
  else
    rm -rf "$prefix" "$work"
  fi
}
trap cleanup EXIT

step() { echo; echo "== $*"; }
fail() { echo "FAIL: $*"; exit 1; }
# Run a command quietly; on failure show its output and fail with the message.
run() {
  local log=$work/last.log what=$1
  shift
  if ! "$@" > "$log" 2>&1; then
    cat "$log"
    fail "$what"
  fi
}

# A vendor's machine knows nothing of this source tree: no inherited search paths.
unset CMAKE_PREFIX_PATH OarSDK_DIR OarSDK_ROOT CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH PKG_CONFIG_PATH \
      OAR_PLUGIN_PATH OAR_DEVICE OAR_STRICT_DEVICE

step "1. install $build_dir into $prefix"
run "cmake --install failed" cmake --install "$build_dir" --prefix "$prefix"
for f in bin/oar include/oar/plugin/plugin.h lib/cmake/OarSDK/OarSDKConfig.cmake lib/pkgconfig/oar-plugin-sdk.pc; do
  [[ -e $prefix/$f ]] || fail "the install has no $f"
done
echo "ok   installed: $(cd "$prefix" && find . -type f | wc -l) files"

step "2. build a copy of the template against $prefix only"
cp -R "$template_dir" "$work/template"
rm -rf "$work/template/build"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
run "configuring the template failed" \
  cmake -S "$work/template" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
        -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
sdk_dir=$(sed -n 's/^OarSDK_DIR:PATH=//p' "$work/build/CMakeCache.txt")
[[ $sdk_dir == "$prefix"/* ]] || fail "find_package(OarSDK) found '$sdk_dir', not the package under $prefix"
echo "ok   OarSDK_DIR=$sdk_dir"
run "building the template failed" cmake --build "$work/build"
plugin=$(find "$work/build" -name 'liboar_plugin_template_device.so' -print -quit)
[[ -n $plugin ]] || fail "the build produced no liboar_plugin_template_device.so"
# Every -I/-isystem must point into the prefix or the copied template; with Ninja, also every header actually
# read (its dependency log) that lives under an oar/ folder.
bad=$(grep -o -- '-\(I\|isystem\) *[^ "]*' "$work/build/compile_commands.json" | sed 's/^-I *//; s/^-isystem *//' |
      grep -v -e "^$prefix/" -e "^$work/" | sort -u)
[[ -z $bad ]] || fail "include paths outside the install prefix: $bad"
if [[ ${#generator[@]} -gt 0 ]]; then
  headers=$(ninja -C "$work/build" -t deps | grep '/oar/' | sed 's/^ *//' | sort -u)
  [[ -n $headers ]] || fail "ninja recorded no oar headers for the template"
  outside=$(grep -v "^$prefix/include/oar/" <<< "$headers" || true)
  [[ -z $outside ]] || fail "the template compiled against headers outside $prefix: $outside"
  echo "ok   $(wc -l <<< "$headers") oar headers, all from $prefix/include"
fi
echo "ok   built $plugin"

step "3. exported symbols"
symbols=$(nm -D --defined-only "$plugin" | awk '{print $NF}' | sort)
[[ $symbols == oar_plugin_get_api ]] || fail "the plugin must export only oar_plugin_get_api; it exports: $symbols"
echo "ok   only oar_plugin_get_api"

step "4. oar devices with OAR_PLUGIN_PATH=$plugin"
devices=$(OAR_PLUGIN_PATH=$plugin "$prefix/bin/oar" devices 2>&1) || { echo "$devices"; fail "oar devices failed"; }
echo "$devices"
grep -Eq '^ +template_device:0 ' <<< "$devices" || fail "'oar devices' does not list template_device:0"

failures=()

step "5. a C99 consumer through pkg-config"
check_pkg_config() {
  export PKG_CONFIG_PATH=$prefix/lib/pkgconfig PKG_CONFIG_LIBDIR=$prefix/lib/pkgconfig  # LIBDIR: nothing else
  local cflags used
  cflags=$(pkg-config --cflags oar-plugin-sdk) || { echo "pkg-config does not know oar-plugin-sdk"; return 1; }
  echo "pkg-config --cflags oar-plugin-sdk: $cflags"
  mkdir -p "$work/c"
  cat > "$work/c/consumer.c" <<'EOF'
#include <stdio.h>

#include "oar/plugin/plugin.h"

int main(void) {
  oar_plugin_api_t api = {0};
  api.struct_size = OAR_PLUGIN_API_STRUCT_SIZE;
  api.abi_major = OAR_PLUGIN_ABI_MAJOR;
  api.abi_minor = OAR_PLUGIN_ABI_MINOR;
  printf("C consumer: oar_plugin_api_t is %u bytes in ABI %u.%u\n", (unsigned)api.struct_size, api.abi_major,
         api.abi_minor);
  return api.struct_size == sizeof api ? 0 : 1;
}
EOF
  # shellcheck disable=SC2086  # cflags is a list of flags
  used=$(cc -std=c99 $cflags -M "$work/c/consumer.c" 2>&1 | tr ' ' '\n' | tr -d "\\\\" | grep '/oar/plugin/plugin.h')
  if [[ $used != "$prefix"/* ]]; then
    echo "the flags do not lead to $prefix/include/oar/plugin/plugin.h (found: '${used:-nothing}')."
    echo "$PKG_CONFIG_PATH/oar-plugin-sdk.pc says: $(grep '^prefix=' "$PKG_CONFIG_PATH/oar-plugin-sdk.pc")"
    echo "An installed .pc file must be relocatable: prefix=\${pcfiledir}/../.. (not the configure-time prefix)."
    return 1
  fi
  # shellcheck disable=SC2086
  cc -std=c99 -pedantic -Wall -Wextra -Werror $cflags "$work/c/consumer.c" -o "$work/c/consumer" || return 1
  "$work/c/consumer" || return 1
  echo "ok   compiled against $used"
}
check_pkg_config || failures+=("pkg-config: a C program cannot use oar-plugin-sdk.pc from the install")

step "6. oar conformance --plugin $plugin --level L2"
skipped=0
if ! "$prefix/bin/oar" conformance --help > /dev/null 2>&1; then
  echo "SKIP: the installed oar has no 'conformance' command"
  skipped=1
else
  "$prefix/bin/oar" conformance --plugin "$plugin" --level L2 --jobs 2 --report-dir "$work/report" \
    > "$work/conformance.log" 2>&1
  status=$?
  tail -n 25 "$work/conformance.log"
  if [[ $status -eq 0 ]] && grep -Eq ': PASS \(L0 PASS, L1 PASS \[.*\], L2 PASS \[' "$work/conformance.log"; then
    echo "ok   L2 passed (L0, L1 and L2 each PASS with their minimums)"
  else
    failures+=("oar conformance --level L2 exited with $status, or a level is not PASS (log above)")
  fi
fi

echo
if [[ ${#failures[@]} -gt 0 ]]; then
  printf 'FAIL: %s\n' "${failures[@]}"
  exit 1
fi
if [[ $skipped -eq 1 ]]; then
  echo "SKIPPED (conformance unavailable); everything else passed"
  exit 77
fi
echo "PASS: template built out of tree against $prefix only, listed by oar devices, certified at L2; pkg-config works"
