#!/usr/bin/env bash
# Conformance run: makes a throwaway PKI, starts three cloudprovider-grpc servers on loopback and
# drives them through the project's CA-faithful client at one of CA's client generations
# (1.35+, 1.34.2, 1.33-1.34.1, 1.29-1.32, 1.25-1.28), then runs the README's grpcurl examples.
#
#   tests/conformance/run.sh                               # the sim cloud with its demo groups, 1.35+
#   CA_GENERATION=1.25-1.28 tests/conformance/run.sh --provider cherry --emulate   # flags go to the main server
#   CA_FUTURE=1 tests/conformance/run.sh       # a CA newer than the proto: unknown fields in every request
#
# The client and grpcurl are built (once, cached outside the clone) by tests/support/conformance.py;
# CONFORMANCE_BIN and GRPCURL_BIN name prebuilt ones. GRPCURL_EXAMPLES=0 skips the README's grpcurl
# lines (the pytest entry runs them once, not per generation and backend).
#
# Servers: "main" (mTLS; the checks), "faulty" (mTLS; a sim group that stocks out and has no price or
# options: error info, UNIMPLEMENTED as each generation passes it up, options answered empty), "plain" (plaintext defaults, for the README's
# grpcurl lines). Exit status 0 only if every check passed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
generation=${CA_GENERATION:-1.35+}

t0=$(date +%s)
step() { echo "== $* (+$(($(date +%s) - t0))s)"; }

if [ -z "${CONFORMANCE_BIN:-}" ] || [ -z "${GRPCURL_BIN:-}" ]; then
  step "building (cached) the client and grpcurl"
  eval "$(cd "$root" && "$python" -m tests.support.conformance)"
fi
harness=$CONFORMANCE_BIN
step "client generation $generation"

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

"$harness" gencerts -dir "$work/pki" -server-name localhost

# start NAME [serve flags...]: runs the server in the background, logs to $work/NAME.log
start() {
  local name=$1; shift
  local port metrics
  # ports from below the ephemeral range, so no outbound connection can take one before the server
  # binds it (tests/support/ports.py)
  read -r port metrics < <(cd "$root" && "$python" -m tests.support.ports 2)
  "$python" -m cloudprovider_grpc.cli serve --address "127.0.0.1:$port" --metrics-address "127.0.0.1:$metrics" \
    --log-level warning "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_port=$port ${name}_metrics=$metrics ${name}_pid=$!"
}

wait_healthy() {
  local name=$1 metrics=$2 pid=$3
  for _ in $(seq 1 150); do
    if curl -fsS "http://127.0.0.1:$metrics/healthz" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.2
  done
  echo "server '$name' did not become healthy; its log:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

tls=(--tls-cert "$work/pki/server.crt" --tls-key "$work/pki/server.key" --tls-ca "$work/pki/ca.crt")
cat >"$work/faulty.yaml" <<'EOF'
sim:
  groups:
    - id: flaky
      min_size: 0
      max_size: 3
      initial_size: 1
      instance_type: sim-2x8
      capacity: {cpu: "2", memory: 8Gi}
      fail: {stockout_after: 1}
EOF

step "starting servers"
start main "${tls[@]}" "$@"
start faulty "${tls[@]}" --config "$work/faulty.yaml"
# the plaintext server only answers the README's grpcurl lines
if [ "${GRPCURL_EXAMPLES:-1}" != 0 ]; then start plain; fi
wait_healthy main "$main_metrics" "$main_pid"
wait_healthy faulty "$faulty_metrics" "$faulty_pid"
if [ "${GRPCURL_EXAMPLES:-1}" != 0 ]; then wait_healthy plain "$plain_metrics" "$plain_pid"; fi

cloud_config() {  # exactly the keys CA's externalgrpc cloud-config has
  cat <<EOF
address: localhost:$1
cert: $work/pki/client.crt
key: $work/pki/client.key
cacert: $work/pki/ca.crt
grpc_timeout: 5s
EOF
}
cloud_config "$main_port" >"$work/cloud-config.yaml"
cloud_config "$faulty_port" >"$work/faulty-cloud-config.yaml"

# "sim": the documented demo groups, checked exactly; "generic": any backend. CONFORMANCE_PROFILE wins.
profile=sim
for arg in "$@"; do
  case "$arg" in --provider|--provider=*|--config|--config=*|--nodes|--nodes=*) profile=generic ;; esac
done
profile=${CONFORMANCE_PROFILE:-$profile}

status=0
step "harness (profile $profile)"
"$harness" run -generation "$generation" -cloud-config "$work/cloud-config.yaml" -metrics "http://127.0.0.1:$main_metrics/metrics" \
  -faulty-cloud-config "$work/faulty-cloud-config.yaml" -faulty-metrics "http://127.0.0.1:$faulty_metrics/metrics" \
  -pki "$work/pki" -profile "$profile" ${CONFORMANCE_ONLY:+-only "$CONFORMANCE_ONLY"} \
  ${CA_FUTURE:+-future} || status=1

if [ "${GRPCURL_EXAMPLES:-1}" != 0 ]; then
  step "README grpcurl examples"
  PATH="$(dirname "$GRPCURL_BIN"):$PATH" PYTHON="$python" "$here/grpcurl_examples.sh" "$plain_port" || status=1
fi

step "done, exit status $status"
exit $status
