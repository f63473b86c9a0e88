#!/usr/bin/env bash
# Checks of the README, the Makefile and the scripts a newcomer runs first
# (issue 28): each prints what is wrong and the script exits 1 if anything
# is. Run by `make test` (it takes a second).
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
bad() { echo "check-docs: $*" >&2; fail=1; }

# scripts/cluster.sh's state directory is not committed by accident.
git check-ignore -q .macp-cluster/nats0.log || bad ".macp-cluster/ is not ignored by git (.gitignore)"

# scripts/cluster.sh prints the addresses it really uses.
out=$(CLUSTER_PRINT_ONLY=1 MACPD0_ADDR=127.0.0.1:6123 MACPD_NODES=2 bash scripts/cluster.sh)
grep -q '^macpd node 0: grpc 127.0.0.1:6123,' <<<"$out" || bad "cluster.sh does not print node 0's MACPD0_ADDR: $out"
grep -q 'start --addr 127.0.0.1:6123 ' <<<"$out" || bad "cluster.sh's example does not use node 0's MACPD0_ADDR: $out"
grep -q '127.0.0.1:51730' <<<"$out" && bad "cluster.sh prints 127.0.0.1:51730 although node 0 is on MACPD0_ADDR: $out"

# Settings and variables a reader needs are documented in the README.
for v in MACP_CONFORMANCE_DIR MACP_DATA_DIR; do
  grep -q "$v" README.md || bad "README.md does not mention $v"
done

# Every `make TARGET` in the README and docs exists in the Makefile.
for t in $(grep -ohE '(`|^|# or: )make [a-z][a-z0-9-]*' README.md docs/*.md | awk '{print $NF}' | sort -u); do
  grep -qE "^$t:" Makefile || bad "README/docs run 'make $t', which the Makefile lacks"
done

# Every repository path the README's commands use exists in a fresh clone.
for p in $(grep -ohE '(\./)?(examples|scripts|deploy|testdata|docs)/[A-Za-z0-9_./-]*[A-Za-z0-9_]' README.md | sed 's#^\./##' | sort -u); do
  [ -e "$p" ] || bad "README.md refers to $p, which is not in the repository"
done

exit $fail
