#!/usr/bin/env bash
# Runs the grpcurl lines of README.md (the fenced sh block after <!-- grpcurl-examples -->) exactly as
# written, with localhost:8086 replaced by localhost:PORT, against a plaintext server that serves the
# sim defaults, and checks what each one prints.
#
#   grpcurl_examples.sh PORT        (grpcurl must be on PATH; PYTHON names a python3 for JSON checks)
set -euo pipefail

port=${1:?usage: grpcurl_examples.sh PORT}
here=$(cd "$(dirname "$0")" && pwd)
readme="$here/../../README.md"
python=${PYTHON:-python3}
service=clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider

mapfile -t lines < <(awk '
  /<!-- grpcurl-examples -->/ { armed = 1; next }
  armed && /^```sh/ { inblock = 1; next }
  inblock && /^```/ { exit }
  inblock && NF { print }
' "$readme")
if [ "${#lines[@]}" -eq 0 ]; then
  echo "FAIL  README.md has no sh block after <!-- grpcurl-examples -->"
  exit 1
fi

passed=0 failed=0
# check NAME OUTPUT: asserts on what one example printed, chosen by what the line calls.
check() {
  local line=$1 out=$2
  case "$line" in
    *" list"*)
      for want in "$service" grpc.health.v1.Health; do
        grep -qx "$want" <<<"$out" || { echo "list lacks $want"; return 1; }
      done ;;
    *" describe "*)
      local n
      n=$(grep -c '^  rpc ' <<<"$out" || true)
      [ "$n" -eq 15 ] || { echo "describe shows $n RPCs, want 15"; return 1; } ;;
    *"/NodeGroups"*)
      "$python" -c '
import json, sys
groups = {g["id"]: g for g in json.loads(sys.stdin.read())["nodeGroups"]}
assert set(groups) >= {"general", "highmem", "gpu"}, groups
assert groups["general"].get("maxSize") == 10, groups["general"]
' <<<"$out" || return 1 ;;
    *"/NodeGroupIncreaseSize"*)
      [ "$(tr -d ' \n' <<<"$out")" = "{}" ] || { echo "unexpected output: $out"; return 1; } ;;
    *"/NodeGroupNodes"*)
      # After the README's increase of general by 2 from its one machine: 1 running + 2 creating.
      "$python" -c '
import json, sys
states = sorted(i.get("status", {}).get("instanceState", "unspecified") for i in json.loads(sys.stdin.read())["instances"])
assert states == ["instanceCreating", "instanceCreating", "instanceRunning"], states
' <<<"$out" || return 1 ;;
    *) ;;  # any other example only has to succeed
  esac
}

for line in "${lines[@]}"; do
  cmd=${line//localhost:8086/localhost:$port}
  if out=$(bash -c "$cmd" 2>&1) && why=$(check "$line" "$out"); then
    passed=$((passed + 1))
    echo "ok    [grpcurl] $line"
  else
    failed=$((failed + 1))
    echo "FAIL  [grpcurl] $line"
    echo "$out" | sed 's/^/      | /' | head -40
    [ -n "${why:-}" ] && echo "      $why"
  fi
  why=""
done
echo "grpcurl examples: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
