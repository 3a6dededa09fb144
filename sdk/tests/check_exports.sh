#!/usr/bin/env bash
# Every Oar plugin must export exactly one dynamic symbol, the ABI entry point. Usage: check_exports.sh LIB...
set -euo pipefail
status=0
for lib in "$@"; do
  symbols=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sort)
  if [[ "$symbols" != "oar_plugin_get_api" ]]; then
    echo "FAIL $lib exports:"; echo "$symbols" | sed 's/^/    /'
    status=1
  else
    echo "ok   $lib exports only oar_plugin_get_api"
  fi
done
exit $status
