# shellcheck shell=bash
# Shared setup for running the official MACP SDKs from checkouts against
# macpd; sourced (not run) by scripts/python-sdk-it.sh, scripts/ts-sdk-it.sh
# and examples/polyglot/run.sh. Each function prints what it does on stderr,
# returns non-zero (with a message) on failure and never modifies the SDK
# checkout. The variables named below are the ones those scripts document.
#
#   sdk_env_proto_dir            sets PROTO_DIR (MACP_PROTO_DIR, default proto/)
#                                and checks the core and mode protos are there.
#   sdk_env_python SDK_DIR STUBS installs the Debian packages the Python SDK
#                                needs (unless MACP_IT_NO_INSTALL=1), generates
#                                the `macp` stub package from PROTO_DIR into the
#                                directory STUBS and smoke-imports it. Use it as
#                                PYTHONPATH="$STUBS:$SDK_DIR/src" with $PY
#                                (Debian's /usr/bin/python3), PYTHONNOUSERSITE=1.
#   sdk_env_typescript SDK_DIR   installs (once, cached by package.json, lock
#                                file and protos) the TypeScript SDK's
#                                dependencies with a stand-in for the
#                                @multiagentcoordinationprotocol/proto package,
#                                and sets SDK_ENV_TS_DEPS to the directory whose
#                                node_modules holds them (vitest, tsx, tsc,
#                                @grpc/grpc-js, ...). Needs PROTO_DIR.
#
# Why the stubs and the stand-in exist (versions, registries): see the
# comments of scripts/python-sdk-it.sh and scripts/ts-sdk-it.sh and
# docs/sdk-suites.md "What the scripts build from our protos".

SDK_ENV_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3

sdk_env_proto_dir() {
  PROTO_DIR=${MACP_PROTO_DIR:-proto}
  case "$PROTO_DIR" in
    /*) ;;
    *) PROTO_DIR="$SDK_ENV_ROOT/$PROTO_DIR" ;;
  esac
  missing=()
  for f in macp/v1/core.proto macp/v1/envelope.proto macp/v1/policy.proto \
    macp/modes/decision/v1/decision.proto macp/modes/proposal/v1/proposal.proto \
    macp/modes/task/v1/task.proto macp/modes/handoff/v1/handoff.proto \
    macp/modes/quorum/v1/quorum.proto; do
    [[ -f "$PROTO_DIR/$f" ]] || missing+=("$f")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "error: proto dir $PROTO_DIR lacks: ${missing[*]} (set MACP_PROTO_DIR)" >&2
    return 2
  fi
}

# SDK_DIR STUBS
sdk_env_python() {
  local SDK_DIR=$1 STUBS=$2
  sdk_env_proto_dir || return
  # ── 1. Debian packages ──────────────────────────────────────────────────
  need_install() {
    [[ -x $PY ]] || return 0
    command -v protoc >/dev/null 2>&1 || return 0
    command -v grpc_python_plugin >/dev/null 2>&1 || return 0
    $PY - <<'EOF' >/dev/null 2>&1 || return 0
import grpc, google.protobuf, pytest, pytest_asyncio, pytest_timeout
EOF
    return 1
  }

  if need_install; then
    if [[ ${MACP_IT_NO_INSTALL:-0} == 1 ]]; then
      echo "error: required packages missing and MACP_IT_NO_INSTALL=1" >&2
      return 1
    fi
    SUDO=
    if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
    echo "${SDK_ENV_TAG:-sdk-env}: installing Debian packages..." >&2
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      python3 python3-grpcio python3-protobuf python3-pytest python3-pytest-asyncio \
      python3-pytest-timeout protobuf-compiler protobuf-compiler-grpc >&2
  fi

  # ── 2. Generate Python stubs ────────────────────────────────────────────

  mapfile -t PROTOS < <(cd "$PROTO_DIR" && find macp -name '*.proto' | LC_ALL=C sort)
  [[ ${#PROTOS[@]} -gt 0 ]] || { echo "error: no .proto files under $PROTO_DIR/macp" >&2; return 2; }

  # Include the well-known types (google/protobuf/*.proto, shipped in
  # /usr/include by Debian's protobuf-compiler) in case our protos import them.
  INCLUDES=(-I "$PROTO_DIR")
  [[ -d /usr/include/google/protobuf ]] && INCLUDES+=(-I /usr/include)

  protoc "${INCLUDES[@]}" \
    --python_out="$STUBS" \
    --grpc_python_out="$STUBS" \
    --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
    "${PROTOS[@]}"

  # Package markers: every directory below macp/ becomes a regular package,
  # matching the layout of the macp-proto wheel.
  find "$STUBS/macp" -type d -exec touch {}/__init__.py \;

  # Smoke-import every generated module (macp/modes/multi_round/v1 included when
  # proto/ has it), so a stub problem fails loudly here rather than as a pile of
  # collection errors; then check the message shapes the SDK relies on.
  # SDK 0.3.0 (April) needs the macp-proto 0.1.2 StreamSessionRequest; SDK 0.4.0
  # (macp-proto >=0.1.3) also calls SuspendSession/ResumeSession and reads
  # CANCELLED and CommitmentPayload.supersedes, which our 0.1.6 tree has.
  SDK_WANTS_013=0
  grep -q 'SuspendSession' "$SDK_DIR/src/macp_sdk/client.py" 2>/dev/null && SDK_WANTS_013=1
  (cd "$STUBS" && find macp -name '*_pb2*.py' | LC_ALL=C sort | sed 's/\.py$//; s#/#.#g') >"$STUBS/.modules"
  PYTHONPATH="$STUBS" PYTHONNOUSERSITE=1 SDK_WANTS_013=$SDK_WANTS_013 PROTO_DIR_SHOWN="$PROTO_DIR" TAG="${SDK_ENV_TAG:-sdk-env}" \
    $PY - "$STUBS/.modules" <<'EOF'
import importlib, os, sys
mods = open(sys.argv[1]).read().split()
for m in mods:
    importlib.import_module(m)
needed = [
    "macp.v1.core_pb2", "macp.v1.core_pb2_grpc", "macp.v1.envelope_pb2",
    "macp.v1.policy_pb2",
    "macp.modes.decision.v1.decision_pb2", "macp.modes.proposal.v1.proposal_pb2",
    "macp.modes.task.v1.task_pb2", "macp.modes.handoff.v1.handoff_pb2",
    "macp.modes.quorum.v1.quorum_pb2",
]
absent = [m for m in needed if m not in mods]
if absent:
    raise SystemExit(f"stubs lack modules {absent}")
from macp.v1 import core_pb2
fields = {f.name for f in core_pb2.StreamSessionRequest.DESCRIPTOR.fields}
missing = {"envelope", "subscribe_session_id", "after_sequence"} - fields
if missing:
    raise SystemExit(f"StreamSessionRequest lacks fields {sorted(missing)} (SDK needs macp-proto>=0.1.2 shape)")
if os.environ.get("SDK_WANTS_013") == "1":
    methods = {m.name for s in core_pb2.DESCRIPTOR.services_by_name.values() for m in s.methods}
    lacks = [n for n in ("SuspendSession", "ResumeSession") if n not in methods]
    if "supersedes" not in {f.name for f in core_pb2.CommitmentPayload.DESCRIPTOR.fields}:
        lacks.append("CommitmentPayload.supersedes")
    from macp.v1 import envelope_pb2
    if "SESSION_STATE_CANCELLED" not in envelope_pb2.SessionState.keys():
        lacks.append("SESSION_STATE_CANCELLED")
    if lacks:
        raise SystemExit(f"the SDK needs macp-proto>=0.1.3; the stubs lack {lacks}")
print(f"{os.environ['TAG']}: {len(mods)} stub modules from {os.environ['PROTO_DIR_SHOWN']} import cleanly", file=sys.stderr)
EOF
}

# SDK_DIR; sets SDK_ENV_TS_DEPS
sdk_env_typescript() {
  local SDK_DIR=$1
  sdk_env_proto_dir || return
  # The files the SDK itself loads: the PROTO_FILES list of its
  # src/proto-registry.ts (0.3.0 names the 8 core and mode files; 0.5.0+ adds
  # macp/modes/multi_round/v1/multi_round.proto). Every one must be in our tree.
  NEEDED=()
  if [[ -f "$SDK_DIR/src/proto-registry.ts" ]]; then
    mapfile -t NEEDED < <(grep -oE "'macp/[A-Za-z0-9_/]+\.proto'" "$SDK_DIR/src/proto-registry.ts" | tr -d "'" | LC_ALL=C sort -u)
  fi
  if [[ ${#NEEDED[@]} -eq 0 ]]; then
    NEEDED=(macp/v1/core.proto macp/v1/envelope.proto macp/v1/policy.proto
      macp/modes/decision/v1/decision.proto macp/modes/proposal/v1/proposal.proto
      macp/modes/task/v1/task.proto macp/modes/handoff/v1/handoff.proto
      macp/modes/quorum/v1/quorum.proto)
  fi
  missing=()
  for f in "${NEEDED[@]}"; do
    [[ -f "$PROTO_DIR/$f" ]] || missing+=("$f")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "error: proto dir $PROTO_DIR lacks: ${missing[*]} (the SDK's src/proto-registry.ts loads them; set MACP_PROTO_DIR)" >&2
    return 2
  fi
  # The stand-in package carries the whole macp/ tree (as the real package does),
  # not only the files the SDK names.
  mapfile -t PROTOS < <(cd "$PROTO_DIR" && find macp -name '*.proto' | LC_ALL=C sort)

  # The version the stand-in calls itself. Our proto/ is the macp-proto 0.1.6
  # wire surface; the real package's .proto content is identical from 0.1.6
  # through 0.1.8 (the SDK's own 0.5.0 commit, c50ec75, says "resolves 0.1.8;
  # content identical through 0.1.8"). So the stand-in is 0.1.6 when the SDK's
  # range admits it (e.g. ^0.1.2 for SDK 0.3.0, ^0.1.6) and otherwise the lowest
  # version the range names, when that is 0.1.7 or 0.1.8 (^0.1.8 for SDK 0.6.0).
  # A range asking for anything newer is refused: our tree is not that package.
  # MACP_TS_IT_PROTO_VERSION overrides (with MACP_PROTO_DIR pointing at the
  # matching tree).
  PROTO_RANGE=$(node -p 'const p=require(process.argv[1]); (p.dependencies||{})["@multiagentcoordinationprotocol/proto"] || ""' "$SDK_DIR/package.json")
  if [[ -n ${MACP_TS_IT_PROTO_VERSION:-} ]]; then
    SHIM_VERSION=$MACP_TS_IT_PROTO_VERSION
  else
    low=${PROTO_RANGE#[\^~]}
    low=${low#>=}
    case "$PROTO_RANGE" in
      '^'0.1.[0-6] | ~0.1.6 | '>='0.1.[0-6] | '') SHIM_VERSION=0.1.6 ;;
      0.1.6 | '^'0.1.[78] | ~0.1.[78] | 0.1.[78] | '>='0.1.[78]) SHIM_VERSION=$low ;;
      *)
        echo "error: the SDK asks for @multiagentcoordinationprotocol/proto $PROTO_RANGE; proto/ is the 0.1.6 (= 0.1.7 = 0.1.8) surface." >&2
        echo "       Point MACP_PROTO_DIR at the matching tree and set MACP_TS_IT_PROTO_VERSION." >&2
        return 2
        ;;
    esac
  fi
  echo "${SDK_ENV_TAG:-sdk-env}: SDK asks for @multiagentcoordinationprotocol/proto ${PROTO_RANGE:-(none)}; stand-in $SHIM_VERSION from $PROTO_DIR (${#PROTOS[@]} files)" >&2

  # ── 2. Dependencies, cached by what determines them ─────────────────────
  CACHE=${MACP_TS_IT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/macpd-ts-sdk-it}
  KEY=$(
    {
      echo v2 "$SHIM_VERSION"
      cat "$SDK_DIR/package.json"
      [[ -f "$SDK_DIR/package-lock.json" ]] && cat "$SDK_DIR/package-lock.json"
      for f in "${PROTOS[@]}"; do echo "$f"; cat "$PROTO_DIR/$f"; done
    } | sha256sum | cut -c1-16
  )
  DEPS=$CACHE/$KEY
  if [[ ! -f "$DEPS/.complete" ]]; then
    if [[ ${MACP_IT_NO_INSTALL:-0} == 1 ]]; then
      echo "error: no cached install in $DEPS and MACP_IT_NO_INSTALL=1" >&2
      return 1
    fi
    mkdir -p "$CACHE"
    BUILD=$(mktemp -d "$CACHE/build.XXXXXX")
    echo "${SDK_ENV_TAG:-sdk-env}: installing the SDK's dependencies into $DEPS ..." >&2
    SHIM=$BUILD/proto-shim
    mkdir -p "$SHIM/proto"
    for f in "${PROTOS[@]}"; do
      mkdir -p "$SHIM/proto/$(dirname "$f")"
      cp "$PROTO_DIR/$f" "$SHIM/proto/$f"
    done
    # Same shape as the spec repo's packages/proto-npm (index.js exports protoDir).
    cat >"$SHIM/package.json" <<EOF
{
  "name": "@multiagentcoordinationprotocol/proto",
  "version": "$SHIM_VERSION",
  "description": "macpd's proto/ (macp-proto 0.1.6 wire surface) standing in for the MACP proto package (raw .proto files)",
  "license": "Apache-2.0",
  "main": "index.js"
}
EOF
    cat >"$SHIM/index.js" <<'EOF'
'use strict';
const path = require('path');
module.exports = { protoDir: path.resolve(__dirname, 'proto') };
EOF
    # The SDK's package.json with the proto dependency pointed at the shim and
    # its scripts dropped; its lock file seeds the versions npm picks.
    SDK_PKG="$SDK_DIR/package.json" OUT="$BUILD/package.json" node -e '
      const fs = require("fs");
      const p = JSON.parse(fs.readFileSync(process.env.SDK_PKG, "utf8"));
      const out = {
        name: "macpd-ts-sdk-it-deps",
        private: true,
        dependencies: { ...(p.dependencies || {}) },
        devDependencies: { ...(p.devDependencies || {}) },
      };
      out.dependencies["@multiagentcoordinationprotocol/proto"] = "file:./proto-shim";
      delete out.devDependencies["@multiagentcoordinationprotocol/proto"];
      fs.writeFileSync(process.env.OUT, JSON.stringify(out, null, 2) + "\n");
      // Keep the lock for every other package, minus the proto entry (whose
      // resolved URL is the credentialed registry).
      const lockPath = process.env.SDK_PKG.replace(/package\.json$/, "package-lock.json");
      if (fs.existsSync(lockPath)) {
        const lock = JSON.parse(fs.readFileSync(lockPath, "utf8"));
        const pk = lock.packages || {};
        delete pk["node_modules/@multiagentcoordinationprotocol/proto"];
        if (pk[""]) {
          pk[""].name = out.name;
          pk[""].dependencies = out.dependencies;
          pk[""].devDependencies = out.devDependencies;
        }
        lock.name = out.name;
        fs.writeFileSync(process.env.OUT.replace(/package\.json$/, "package-lock.json"), JSON.stringify(lock, null, 2) + "\n");
      }
    '
    # npm links the file: dependency relatively (node_modules/... -> ../../
    # proto-shim), so the install stays valid after the rename below.
    if ! (cd "$BUILD" && npm install --no-audit --no-fund >&2) || ! [[ -x "$BUILD/node_modules/.bin/vitest" ]]; then
      echo "error: npm install in $BUILD failed or did not provide vitest" >&2
      rm -rf "$BUILD"
      return 1
    fi
    touch "$BUILD/.complete"
    rm -rf "$DEPS"
    mv "$BUILD" "$DEPS"
  fi
  # shellcheck disable=SC2034  # read by the scripts that source this file
  SDK_ENV_TS_DEPS=$DEPS
}
