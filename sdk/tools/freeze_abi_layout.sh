#!/usr/bin/env bash
# Record the binary layout of an ABI release as checks that can be compiled against any header tree.
#
# Usage: freeze_abi_layout.sh INCLUDE_DIR > layout_<major>_<minor>.inc
#
# Lists every struct member, enumerator and public macro of INCLUDE_DIR/oar/plugin/*.h (through
# gen_abi_reference.sh --frozen-list), compiles a small C program against those headers with the system C
# compiler (${CC:-cc}) and prints what it measured, one macro call per item:
#   OAR_FROZEN_FIELD(type, member, offset, size)   every member, nested union members included
#   OAR_FROZEN_SIZEOF(type, size)                  sizeof; may grow in a later minor (exact-version check)
#   OAR_FROZEN_ELEMENT_SIZEOF(type, size)          sizeof of array-element structs: frozen for the major
#   OAR_FROZEN_INT(name, value)                    enumerators and integer macros fixed for the major
#   OAR_FROZEN_INT_EXACT(name, value)              OAR_PLUGIN_ABI_MINOR and *_STRUCT_SIZE of growable structs
#   OAR_FROZEN_STRING(name, "value")               string macros (attribute keys, the entry symbol)
# sdk/tests/compat/layout_check.c defines those macros as static/run-time assertions. Run this ONCE when a
# version is released and commit the output next to the frozen headers (docs/abi-versioning.md); never
# regenerate a released file: its whole point is that it does not follow the headers.

# shellcheck disable=SC2028  # the echoed lines are C source: their backslashes must stay literal
set -euo pipefail
[[ $# -eq 1 ]] || { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
inc=$1
here=$(cd "$(dirname "$0")" && pwd)
list=$("$here/gen_abi_reference.sh" --frozen-list "$inc")
# Structs used as array elements (types.h) and fixed-size blobs: their size is part of the major's contract.
elements=" oar_attr_t oar_tensor_desc_t oar_ccl_unique_id_t oar_kernel_arg_t "

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo '#include <stddef.h>'
  echo '#include <stdio.h>'
  echo '#include "oar/plugin/plugin.h"'
  echo 'int main(void) {'
  prev_type=
  while read -r kind a b; do
    case $kind in
      field)
        if [[ $a != "$prev_type" ]]; then
          if [[ $elements == *" $a "* ]]; then
            echo "  printf(\"OAR_FROZEN_ELEMENT_SIZEOF($a, %zu)\\n\", sizeof($a));"
          else
            echo "  printf(\"OAR_FROZEN_SIZEOF($a, %zu)\\n\", sizeof($a));"
          fi
          prev_type=$a
        fi
        echo "  printf(\"OAR_FROZEN_FIELD($a, $b, %zu, %zu)\\n\", offsetof($a, $b), sizeof((($a*)0)->$b));"
        ;;
      enum)
        echo "  printf(\"OAR_FROZEN_INT($a, %lld)\\n\", (long long)($a));"
        ;;
      macro)
        if [[ $b == string ]]; then
          echo "  printf(\"OAR_FROZEN_STRING($a, \\\"%s\\\")\\n\", $a);"
        elif [[ $a == OAR_PLUGIN_ABI_MINOR || ( $a == *_STRUCT_SIZE && $a != OAR_ATTR_STRUCT_SIZE &&
                $a != OAR_TENSOR_DESC_STRUCT_SIZE ) ]]; then
          echo "  printf(\"OAR_FROZEN_INT_EXACT($a, %lld)\\n\", (long long)($a));"
        else
          echo "  printf(\"OAR_FROZEN_INT($a, %lld)\\n\", (long long)($a));"
        fi
        ;;
    esac
  done <<< "$list"
  echo '  return 0;'
  echo '}'
} > "$tmp/freeze.c"
"${CC:-cc}" -std=c99 -Wall -Werror -I "$inc" "$tmp/freeze.c" -o "$tmp/freeze"
major=$(awk '$2 == "OAR_PLUGIN_ABI_MAJOR" { print $3 }' "$inc/oar/plugin/version.h")
minor=$(awk '$2 == "OAR_PLUGIN_ABI_MINOR" { print $3 }' "$inc/oar/plugin/version.h")
cat <<EOF
/* Frozen binary layout of Oar plugin ABI ${major}.${minor} on LP64 Linux (x86-64, AArch64).
 * Generated once by sdk/tools/freeze_abi_layout.sh from the ${major}.${minor} headers. NEVER regenerate or edit it:
 * a failing check means a header change broke compatibility (see docs/abi-versioning.md). */
EOF
"$tmp/freeze"
