#!/usr/bin/env bash
# Fetches the MACP spec repository at the commit macpd implements into .spec/
# (git-ignored): its schemas/conformance fixtures and schemas/proto files are
# what the fixture-driven tests and the spec-proto comparison read when
# ../shared/conformance is not beside the checkout. Needs git and access to
# github.com. Idempotent: does nothing when .spec/ is already at the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(sed -n 's/^const SpecCommit = "\([0-9a-f]*\)"$/\1/p' internal/testutil/spec.go)
repo=${MACP_SPEC_REPO:-https://github.com/multiagentcoordinationprotocol/multiagentcoordinationprotocol}
[ -n "$commit" ] || { echo "fetch-spec: no SpecCommit in internal/testutil/spec.go" >&2; exit 1; }
if [ "$(git -C .spec rev-parse HEAD 2>/dev/null || true)" = "$commit" ]; then
  echo ".spec is at $commit"
  exit 0
fi
rm -rf .spec
git init -q .spec
git -C .spec fetch -q --depth 1 "$repo" "$commit"
git -C .spec -c advice.detachedHead=false checkout -q FETCH_HEAD
echo "fetched the MACP spec at $commit into .spec/ ($(ls .spec/schemas/conformance/*.json | wc -l) fixtures)"
