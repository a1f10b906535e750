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

passed=0 failed=0 increased=0
# check LINE OUTPUT: asserts on what one example printed, chosen by what the line calls; on failure
# it sets `why`. It runs in this shell (not a subshell) so it can count the increases made so far.
check() {
  local line=$1 out=$2
  case "$line" in
    *" list"*)
      for want in "$service" grpc.health.v1.Health; do
        grep -qx "$want" <<<"$out" || { why="list lacks $want"; return 1; }
      done ;;
    *" describe "*)
      local n
      n=$(grep -c '^  rpc ' <<<"$out" || true)
      [ "$n" -eq 15 ] || { why="describe shows $n RPCs, want 15"; return 1; } ;;
    *"/NodeGroups"*)
      "$python" -c '
import json, sys
groups = {g["id"]: g for g in json.loads(sys.stdin.read())["nodeGroups"]}
assert set(groups) >= {"general", "highmem", "gpu"}, groups
assert groups["general"].get("maxSize") == 10, groups["general"]
' <<<"$out" 2>&1 || { why="NodeGroups check failed"; return 1; } ;;
    *"/NodeGroupIncreaseSize"*)
      [ "$(tr -d ' \n' <<<"$out")" = "{}" ] || { why="unexpected output"; return 1; }
      if [[ $line =~ \"delta\":\ *([0-9]+) ]]; then increased=$((increased + BASH_REMATCH[1])); fi ;;
    *"/NodeGroupNodes"*)
      # general starts with one running machine; the examples' increases show up at once as creating
      # (the sim's provisioning delay is 30 s). Assumes, like the README, that they target general.
      "$python" -c '
import json, sys
want = ["instanceCreating"] * int(sys.argv[1]) + ["instanceRunning"]
states = sorted(i.get("status", {}).get("instanceState", "unspecified") for i in json.load(sys.stdin)["instances"])
assert states == want, (states, want)
' "$increased" <<<"$out" || { why="instance states differ (see the assertion above)"; return 1; } ;;
    *) ;;  # any other example only has to succeed
  esac
}

for line in "${lines[@]}"; do
  cmd=${line//localhost:8086/localhost:$port}
  why=""
  if out=$(bash -c "$cmd" 2>&1) && check "$line" "$out"; then
    passed=$((passed + 1))
    echo "ok    [grpcurl] $line"
  else
    failed=$((failed + 1))
    echo "FAIL  [grpcurl] $line"
    echo "$out" | sed 's/^/      | /' | head -40
    echo "      ${why:-the command failed}"
  fi
done
echo "grpcurl examples: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
