#!/usr/bin/env bash
# Regenerates the Go code in gen/ from the .proto sources in proto/: the MACP
# protocol (proto/macp -> gen/macp) and macpd's internal formats
# (proto/macpd -> gen/macpd, e.g. the store's record format).
#
# Usage:
#   scripts/generate.sh            regenerate gen/macp and gen/macpd in place (idempotent)
#   scripts/generate.sh --check    generate into a temp dir and diff against gen/macp and
#                                  gen/macpd; exits non-zero if the committed code has drifted
#
# Tools (pinned):
#   protoc              PROTOC_VERSION below; Debian: apt-get install -y protobuf-compiler
#                       (override the binary with PROTOC=/path/to/protoc)
#   protoc-gen-go       same version as google.golang.org/protobuf in go.mod
#   protoc-gen-go-grpc  PROTOC_GEN_GO_GRPC_VERSION below
# The Go plugins are installed into .tmp/bin (git-ignored) on first use.
set -euo pipefail

PROTOC_VERSION="3.21.12"
PROTOC_GEN_GO_GRPC_VERSION="v1.6.2"
GO_MODULE="github.com/macpd/macpd"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

mode="generate"
case "${1:-}" in
  "") ;;
  --check) mode="check" ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# --- protoc -----------------------------------------------------------------
protoc="${PROTOC:-protoc}"
if ! command -v "$protoc" >/dev/null 2>&1; then
  echo "generate: protoc not found; install it with: apt-get install -y protobuf-compiler" >&2
  exit 1
fi
protoc_version="$("$protoc" --version | awk '{print $2}')"
echo "generate: using $(command -v "$protoc") (libprotoc ${protoc_version})"
if [[ "$protoc_version" != "$PROTOC_VERSION" ]]; then
  echo "generate: protoc ${PROTOC_VERSION} is required (the version is recorded in the generated headers), found ${protoc_version}" >&2
  exit 1
fi

# --- Go plugins ---------------------------------------------------------------
bindir="$root/.tmp/bin"
mkdir -p "$bindir"
protobuf_version="$(go list -m -f '{{.Version}}' google.golang.org/protobuf)"

# install_plugin NAME PACKAGE VERSION WANT_VERSION_OUTPUT
install_plugin() {
  local name="$1" pkg="$2" version="$3" want="$4"
  if [[ ! -x "$bindir/$name" ]] || [[ "$("$bindir/$name" --version 2>/dev/null)" != "$want" ]]; then
    echo "generate: installing ${pkg}@${version} into .tmp/bin"
    GOBIN="$bindir" go install "${pkg}@${version}"
  fi
  echo "generate: using $("$bindir/$name" --version)"
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go \
  "$protobuf_version" "protoc-gen-go ${protobuf_version}"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc \
  "$PROTOC_GEN_GO_GRPC_VERSION" "protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION#v}"

# --- generation ---------------------------------------------------------------
# The .proto files carry no go_package option (the MACP ones must stay
# descriptor-identical to the spec; ours follow suit), so each file is mapped to
# its Go package with M flags.
trees=(macp macpd)
protos=()
while IFS= read -r f; do protos+=("$f"); done < <(cd proto && find "${trees[@]}" -name '*.proto' | LC_ALL=C sort)

mflags=()
for f in "${protos[@]}"; do
  dir="$(dirname "$f")"                       # e.g. macp/modes/decision/v1
  parent="$(basename "$(dirname "$dir")")"    # macp -> macpv1, decision -> decisionv1, store -> storev1
  mflags+=("M${f}=${GO_MODULE}/gen/${dir};${parent}$(basename "$dir")")
done

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

go_opts=("--go_opt=module=${GO_MODULE}/gen")
grpc_opts=("--go-grpc_opt=module=${GO_MODULE}/gen")
for m in "${mflags[@]}"; do
  go_opts+=("--go_opt=$m")
  grpc_opts+=("--go-grpc_opt=$m")
done

"$protoc" -I proto \
  --plugin=protoc-gen-go="$bindir/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bindir/protoc-gen-go-grpc" \
  --go_out="$out" "${go_opts[@]}" \
  --go-grpc_out="$out" "${grpc_opts[@]}" \
  "${protos[@]}"

if [[ "$mode" == "check" ]]; then
  drift=0
  for t in "${trees[@]}"; do
    diff -ru "gen/$t" "$out/$t" || drift=1
  done
  if [[ $drift -ne 0 ]]; then
    echo "generate: gen/ is out of date with proto/; run 'make generate' and commit the result" >&2
    exit 1
  fi
  echo "generate: gen/ is up to date"
  exit 0
fi

# Replace only the generated trees so hand-written files in gen/ (drift_test.go) survive.
mkdir -p gen
for t in "${trees[@]}"; do
  rm -rf "gen/$t"
  cp -R "$out/$t" "gen/$t"
  echo "generate: wrote $(find "gen/$t" -name '*.go' | wc -l | tr -d ' ') files under gen/$t"
done
