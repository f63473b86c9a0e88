#!/usr/bin/env bash
# The long checks of make test-all beyond `go test -race ./...` (the
# Makefile runs this after it). Each was a step of .ci/run; CI runs them
# through make test-all. Needs qemu-user (qemu-i386) and, under CI=true,
# the outside clients .ci/run installs. The polyglot example runs when
# checkouts of the official SDKs are there (SDK_PY_DIR, SDK_TS_DIR) and is
# otherwise skipped with a line in the log saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- issue 12 hardening checks (one block): (1) fuzzing the gRPC edge: raw
# request bytes through grpc-go's transport, decoding and admission for a
# CI-length run beyond the committed corpus that the tests replay
# (internal/server/testdata/fuzz/FuzzRequestDecoding); a panic, INTERNAL or
# UNKNOWN fails the run and writes the input under that directory.
# (2) stream-memory heap bounds (docs/security.md "Stream buffers"): 256
# never-reading gRPC / SSE / WebSocket followers on 100 MB of history stay
# within the stream budget; measured without -race (make test-all runs the
# packages under -race, where these tests skip saying so).
echo "--- fuzz FuzzRequestDecoding (${FUZZTIME:-60s})"
go test -count=1 -run '^$' -fuzz '^FuzzRequestDecoding$' -fuzztime="${FUZZTIME:-60s}" ./internal/server
echo "--- fuzz FuzzRepairDamagedWAL (${FUZZTIME_REPAIR:-30s})"
go test -count=1 -run '^$' -fuzz '^FuzzRepairDamagedWAL$' -fuzztime="${FUZZTIME_REPAIR:-30s}" ./internal/store/pebblestore
echo "--- stream-memory heap bounds"
set -o pipefail
go test -count=1 -run '^TestNeverReading|^TestStalledSSE' -v ./internal/server ./internal/httpapi | grep -E '^(---|ok|FAIL|PASS)|streammem|streamsharemem'

# qemu-user runs the snapshot package's golden-id tests as a GOARCH=386
# binary (the kernel may lack 32-bit support). Go's asynchronous preemption
# signals crash under qemu-user 7, hence GODEBUG=asyncpreemptoff=1.
echo "--- snapshot golden ids under GOARCH=386"
GODEBUG=asyncpreemptoff=1 GOARCH=386 CGO_ENABLED=0 go test -count=1 -exec qemu-i386 ./internal/snapshot/...

# The SDK projection/runtime agreement properties at their full count
# (10,000 random histories per mode and per profile, with suspend, resume
# and cancel; 10,000 random Decision policies and histories for the newest
# rules); make test runs them with -short, under -race they run with fewer.
echo "--- SDK projection properties, full count"
go test -count=1 -run 'TestProjectionAgreesWithRuntime|TestDecisionRulesAgreeWithRuntime' -v ./sdk | grep -E '^(---|ok|FAIL|PASS)|histories'

# The image builder is its own module (deploy/image/go.mod): go test ./...
# at the root does not reach it.
echo "--- deploy/image: vet and tests"
(cd deploy/image && go vet ./... && go test -count=1 ./...)

echo "--- black-box conformance (macpctl conformance against macpd)"
go build -o bin/ ./cmd/...
addr=127.0.0.1:50551
# Its own data directory: a macpd of the developer's may hold .macp-data.
data=$(mktemp -d)
MACP_ALLOW_INSECURE=1 MACP_BIND_ADDR=$addr MACP_LOG_LEVEL=warn MACP_DATA_DIR=$data bin/macpd &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 1 50); do
  bin/macpctl init --insecure --addr $addr >/dev/null 2>&1 && break
  sleep 0.2
done
# The spec's fixtures must be there (../shared/conformance, or .spec/ after
# make spec, or $MACP_CONFORMANCE_DIR): a run without them would prove less
# and say nothing.
spec=${MACP_CONFORMANCE_DIR:-../shared/conformance}
[ -d "$spec" ] || spec=.spec/schemas/conformance
if [ ! -d "$spec" ]; then
  echo "the spec's conformance fixtures are missing (../shared/conformance, MACP_CONFORMANCE_DIR; or run make spec)" >&2
  exit 1
fi
bin/macpctl conformance --insecure --addr $addr "$spec" testdata/conformance
kill -TERM $pid
wait $pid

# The newest spec's 33 fixtures (new format, inline policies) against a macpd
# whose new sessions are bound to profile latest, on the same data directory:
# the store then holds sessions of both profiles.
echo "--- black-box conformance, profile latest (the newest spec's fixtures)"
latest=${MACP_CONFORMANCE_LATEST_DIR:-../shared/conformance-latest}
if [ ! -d "$latest" ]; then
  echo "the newest spec's conformance fixtures are missing ($latest, MACP_CONFORMANCE_LATEST_DIR)" >&2
  exit 1
fi
addr=127.0.0.1:50552
MACP_ALLOW_INSECURE=1 MACP_PROFILE=latest MACP_BIND_ADDR=$addr MACP_LOG_LEVEL=warn MACP_DATA_DIR=$data bin/macpd &
pid=$!
for _ in $(seq 1 50); do
  bin/macpctl init --insecure --addr $addr >/dev/null 2>&1 && break
  sleep 0.2
done
bin/macpctl conformance --insecure --addr $addr "$latest"
kill -TERM $pid
wait $pid
# Both profiles in one store replay to the same states offline.
bin/macpctl verify --data-dir "$data"
bin/macpctl replay --data-dir "$data" --all

# The polyglot example (examples/polyglot): a Go coordinator, a Python SDK
# voter and a TypeScript SDK voter in one Decision session. It needs
# checkouts of the official SDKs, which are not part of this repository and
# are not fetched here (CI does not depend on GitHub): SDK_PY_DIR and
# SDK_TS_DIR, or ../macp-sdk-python and ../macp-sdk-typescript. Without them
# the step is skipped and says so; this is the one skip of this script.
echo "--- polyglot example (examples/polyglot/run.sh)"
py_sdk=${SDK_PY_DIR:-../macp-sdk-python}
ts_sdk=${SDK_TS_DIR:-../macp-sdk-typescript}
if [ -d "$py_sdk" ] && [ -d "$ts_sdk" ]; then
  SDK_PY_DIR=$py_sdk SDK_TS_DIR=$ts_sdk bash examples/polyglot/run.sh
elif [ -n "${SDK_PY_DIR:-}" ] || [ -n "${SDK_TS_DIR:-}" ]; then
  echo "polyglot example: SDK_PY_DIR=${SDK_PY_DIR:-(unset)} SDK_TS_DIR=${SDK_TS_DIR:-(unset)}: set both to existing checkouts" >&2
  exit 1
else
  echo "SKIPPED the polyglot example: no checkouts of the official SDKs (set SDK_PY_DIR and SDK_TS_DIR, or put them at ../macp-sdk-python and ../macp-sdk-typescript); they are not fetched in CI, which does not depend on GitHub"
fi

# The deterministic simulation's CI budget: 120 seeds without the race
# detector (make test-all ran a few under it). A failure prints the seed and
# the command that reruns it exactly (docs/simulation.md).
echo "--- deterministic simulation (make sim, 120 seeds)"
make sim
