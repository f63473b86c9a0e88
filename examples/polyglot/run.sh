#!/usr/bin/env bash
# The polyglot example in one command (examples/polyglot/README.md): one
# Decision session on one macpd, coordinated by a Go program written with
# our SDK, with one voter written with the official Python SDK and one with
# the official TypeScript SDK. Exits 0 only if every program does: the
# coordinator checks the outcome (Commitment accepted, session RESOLVED, an
# APPROVE vote from each voter's own identity), each voter exits 0 only
# after it voted and saw the Commitment.
#
# Usage: SDK_PY_DIR=../macp-sdk-python SDK_TS_DIR=../macp-sdk-typescript \
#          examples/polyglot/run.sh
#
#   SDK_PY_DIR   checkout of macp-sdk-python (0.4.x; src/macp_sdk), read only
#   SDK_TS_DIR   checkout of macp-sdk-typescript (0.6.x; package.json, src/),
#                read only
#
# Setup is shared with scripts/python-sdk-it.sh and scripts/ts-sdk-it.sh
# (scripts/sdk-env.sh): Debian's python3 with python3-grpcio and
# python3-protobuf and stubs generated from proto/, and the TypeScript SDK's
# npm dependencies installed once into the same cache as ts-sdk-it.sh
# (MACP_TS_IT_CACHE; MACP_IT_NO_INSTALL=1 forbids apt-get and npm install).
# Here the TypeScript SDK is compiled with its own tsconfig (to dist/, as its
# package is published) in a scratch copy, and the voter imports it as
# `macp-sdk-typescript` and runs under tsx.
#
# macpd: built from this tree, MACP_PROFILE=latest (what the current SDKs
# speak, docs/sdk-suites.md), memory store, plaintext on 127.0.0.1 (a free
# port, or POLYGLOT_ADDR), static bearer tokens generated for this run: each
# program is its own authenticated sender (coordinator, py-voter, ts-voter).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

say() { echo "polyglot: $*" >&2; }
die() {
  say "error: $*"
  exit 2
}

[[ -n ${SDK_PY_DIR:-} && -n ${SDK_TS_DIR:-} ]] ||
  die "set SDK_PY_DIR and SDK_TS_DIR to checkouts of macp-sdk-python and macp-sdk-typescript"
[[ -d "$SDK_PY_DIR/src/macp_sdk" ]] || die "$SDK_PY_DIR does not look like macp-sdk-python (no src/macp_sdk)"
if ! [[ -f "$SDK_TS_DIR/package.json" && -d "$SDK_TS_DIR/src" ]] ||
  ! grep -q '"name": *"macp-sdk-typescript"' "$SDK_TS_DIR/package.json"; then
  die "$SDK_TS_DIR does not look like macp-sdk-typescript (package.json, src/)"
fi
SDK_PY_DIR=$(cd "$SDK_PY_DIR" && pwd)
SDK_TS_DIR=$(cd "$SDK_TS_DIR" && pwd)
for tool in go node npm; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found"
done
say "Python SDK $(sed -n 's/^version = "\(.*\)"/\1/p' "$SDK_PY_DIR/pyproject.toml" | head -1) from $SDK_PY_DIR"
say "TypeScript SDK $(node -p 'require(process.argv[1]).version' "$SDK_TS_DIR/package.json") from $SDK_TS_DIR"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/macpd-polyglot.XXXXXX")
TSRUN=
pids=()
# shellcheck disable=SC2317  # invoked via trap
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK" ${TSRUN:+"$TSRUN"}
}
trap cleanup EXIT

# ── SDK environments (scripts/sdk-env.sh) ───────────────────────────────
# shellcheck source=scripts/sdk-env.sh
. "$ROOT/scripts/sdk-env.sh"
SDK_ENV_TAG=polyglot
mkdir -p "$WORK/pystubs"
sdk_env_python "$SDK_PY_DIR" "$WORK/pystubs"
sdk_env_typescript "$SDK_TS_DIR"
DEPS=$SDK_ENV_TS_DEPS

# The TypeScript SDK, built as its package is published (dist/), next to the
# cached node_modules so Node resolves its dependencies there; the voter
# resolves `macp-sdk-typescript` through its own node_modules link.
TSRUN=$(mktemp -d "$DEPS/polyglot.XXXXXX")
mkdir -p "$TSRUN/macp-sdk-typescript" "$TSRUN/voter/node_modules"
tar -C "$SDK_TS_DIR" --exclude=./node_modules --exclude=./.git --exclude=./dist --exclude=./coverage -cf - . |
  tar -C "$TSRUN/macp-sdk-typescript" -xf -
say "compiling the TypeScript SDK (tsc)"
(cd "$TSRUN/macp-sdk-typescript" && "$DEPS/node_modules/.bin/tsc" -p tsconfig.json)
ln -s ../../macp-sdk-typescript "$TSRUN/voter/node_modules/macp-sdk-typescript"
cp "$HERE/typescript/voter.ts" "$TSRUN/voter/voter.ts"
# Type-check the voter against the SDK's declarations (tsx only strips types).
(cd "$TSRUN/voter" && "$DEPS/node_modules/.bin/tsc" --noEmit --strict --target ES2022 \
  --module Node16 --moduleResolution Node16 --types node --skipLibCheck voter.ts)

# ── macpd and the coordinator ───────────────────────────────────────────
say "building macpd and the coordinator"
(cd "$ROOT" && go build -o "$WORK/bin/" ./cmd/macpd ./examples/polyglot/coordinator)

if [[ -n ${POLYGLOT_ADDR:-} ]]; then
  ADDR=$POLYGLOT_ADDR
else
  ADDR=127.0.0.1:$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
token() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
TOK_COORD=$(token)
TOK_PY=$(token)
TOK_TS=$(token)
TOKENS=$(
  cat <<EOF
[{"token":"$TOK_COORD","sender":"coordinator"},
 {"token":"$TOK_PY","sender":"py-voter","can_start_sessions":false},
 {"token":"$TOK_TS","sender":"ts-voter","can_start_sessions":false}]
EOF
)
say "starting macpd (profile latest, static tokens) on $ADDR"
MACP_PROFILE=latest MACP_MEMORY_ONLY=1 MACP_ALLOW_PLAINTEXT=1 MACP_LOG_LEVEL=warn \
  MACP_BIND_ADDR=$ADDR MACP_AUTH_TOKENS_JSON=$TOKENS "$WORK/bin/macpd" &
pids+=($!)
up=0
for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/${ADDR%:*}/${ADDR##*:}") 2>/dev/null; then
    up=1
    break
  fi
  sleep 0.1
done
[[ $up == 1 ]] || die "macpd did not start listening on $ADDR"

# ── the session ─────────────────────────────────────────────────────────
SID=$(cat /proc/sys/kernel/random/uuid)
say "session $SID"
export MACP_ADDR=$ADDR MACP_SESSION_ID=$SID VOTER_TIMEOUT=${VOTER_TIMEOUT:-60}

MACP_TOKEN=$TOK_PY MACP_SENDER=py-voter PYTHONPATH="$WORK/pystubs:$SDK_PY_DIR/src" \
  PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 $PY "$HERE/python/voter.py" &
py_pid=$!
pids+=("$py_pid")
(cd "$TSRUN/voter" && MACP_TOKEN=$TOK_TS MACP_SENDER=ts-voter exec "$DEPS/node_modules/.bin/tsx" voter.ts) &
ts_pid=$!
pids+=("$ts_pid")

rc=0
MACP_TOKEN=$TOK_COORD "$WORK/bin/coordinator" -addr "$ADDR" -session "$SID" -voters py-voter,ts-voter || {
  say "the coordinator failed; stopping the voters"
  kill "$py_pid" "$ts_pid" 2>/dev/null || true
  rc=1
}
wait "$py_pid" || {
  say "the Python voter failed"
  rc=1
}
wait "$ts_pid" || {
  say "the TypeScript voter failed"
  rc=1
}
if [[ $rc == 0 ]]; then
  say "PASS: Go coordinator, Python voter and TypeScript voter resolved session $SID"
else
  say "FAIL"
fi
exit $rc
