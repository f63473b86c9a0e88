#!/usr/bin/env bash
# Run the official MACP Python SDK's HttpTransportAdapter (unmodified)
# against macpd's polling feed GET /sessions/{id}/events?after=N
# (internal/httpapi, README "HTTP and WebSocket bindings").
#
# Usage: scripts/python-sdk-http-it.sh SDK_DIR [pytest args...]
#
#   SDK_DIR   checkout of the python-sdk repo (src/macp_sdk); never modified
#             and never part of this repository.
#
# The script builds and starts its own macpd (memory only, dev identities)
# with gRPC on MACP_IT_GRPC_ADDR (default 127.0.0.1:50561) and HTTP on
# MACP_IT_HTTP_ADDR (default 127.0.0.1:50562), then runs
# scripts/testdata/sdk_http_transport_test.py through scripts/python-sdk-it.sh
# (Debian's python3 with the SDK's dependencies and stubs generated from our
# proto/).
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 SDK_DIR [pytest args...]" >&2; exit 2; }
SDK_DIR=$1
shift
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GRPC_ADDR=${MACP_IT_GRPC_ADDR:-127.0.0.1:50561}
HTTP_ADDR=${MACP_IT_HTTP_ADDR:-127.0.0.1:50562}

BIN=$(mktemp -d "${TMPDIR:-/tmp}/macpd-http-it.XXXXXX")
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$BIN"' EXIT
(cd "$ROOT" && go build -o "$BIN/" ./cmd/macpd)
MACP_ALLOW_INSECURE=1 MACP_MEMORY_ONLY=1 MACP_LOG_LEVEL=warn MACP_BIND_ADDR=$GRPC_ADDR MACP_HTTP_ADDR=$HTTP_ADDR "$BIN/macpd" &
pid=$!
for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/${HTTP_ADDR%:*}/${HTTP_ADDR##*:}") 2>/dev/null; then break; fi
  sleep 0.1
done

export MACP_HTTP_BASE="http://$HTTP_ADDR"
MACP_SDK_TESTS="$ROOT/scripts/testdata/sdk_http_transport_test.py" "$ROOT/scripts/python-sdk-it.sh" "$SDK_DIR" "$@"
