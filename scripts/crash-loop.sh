#!/usr/bin/env bash
# crash-loop.sh [N] — run the crash test (internal/crashtest) N times
# (default 20), each with its own kill-schedule seed, and sum up.
#
# Each run is "go test -count=1 -v -run TestCrash ./internal/crashtest/" with
# MACP_CRASH_SEED set; its output goes to $CRASH_LOOP_OUT/run-I-seed-S.log
# (default: a new directory under ${TMPDIR:-/tmp}). A failing run keeps its
# work directory (data dir, macpd.log, acked logs, problems.txt) and its log
# says where; rerun one with MACP_CRASH_SEED=S to replay its kill schedule.
#
# Environment:
#   CRASH_TEST_FLAGS  extra go test flags, e.g. "-race"
#   CRASH_SEED_BASE   derive the seeds from this number (default: random)
#   CRASH_LOOP_OUT    where the run logs go
#   MACP_CRASH_ROUNDS, MACP_CRASH_KEEP, MACP_CRASH_MACPD_ENV are passed on
#                     (see internal/crashtest/doc.go)
#
# Prints "N runs, P passed, F failed", the seeds of the failures, and the
# totals of the runs' CRASHTEST lines (kills, acked envelopes checked, lost,
# duplicated, ...). Exits 1 if any run failed.
set -euo pipefail

n=${1:-20}
if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
	echo "usage: $0 [N]  (N runs, default 20)" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
out=${CRASH_LOOP_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/crash-loop.XXXXXX")}
mkdir -p "$out"
base=${CRASH_SEED_BASE:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
read -r -a flags <<<"${CRASH_TEST_FLAGS:-}"

passed=0
failed=0
failures=()
: >"$out/summary.txt"
for ((i = 1; i <= n; i++)); do
	seed=$((base * 1000 + i))
	log="$out/run-$i-seed-$seed.log"
	start=$(date +%s)
	if MACP_CRASH_SEED=$seed go test -count=1 -v "${flags[@]}" -run 'TestCrash' ./internal/crashtest/ >"$log" 2>&1; then
		passed=$((passed + 1))
		verdict=PASS
	else
		failed=$((failed + 1))
		failures+=("$seed")
		verdict=FAIL
	fi
	grep -o 'CRASHTEST .*' "$log" >>"$out/summary.txt" || true
	printf 'run %2d/%d seed %s: %s (%ds)  %s\n' "$i" "$n" "$seed" "$verdict" "$(($(date +%s) - start))" \
		"$(grep -o 'CRASHTEST .*' "$log" | sed -E 's/.*variant=([a-z]+).* kills=([0-9]+).* checked=([0-9]+) lost=([0-9]+) duplicated=([0-9]+).*/\1: kills=\2 checked=\3 lost=\4 dup=\5/' | paste -sd ' ' -)"
	if [[ $verdict == FAIL ]]; then
		grep -E 'evidence kept|problem\(s\)|FAIL|panic' "$log" | head -5 | sed 's/^/    /'
	fi
done

echo
echo "$n runs, $passed passed, $failed failed"
if ((failed > 0)); then
	echo "failed seeds: ${failures[*]} (logs in $out; replay one with MACP_CRASH_SEED=SEED go test -count=1 -v -run TestCrashRandom ./internal/crashtest/)"
fi
# Totals over every test of every run (both variants).
awk '{
	for (i = 2; i <= NF; i++) {
		split($i, kv, "=")
		if (kv[2] ~ /^[0-9]+$/) sum[kv[1]] += kv[2]
	}
	tests++
}
END {
	printf "totals over %d crash tests: kills=%d sends=%d acked=%d (over pipelined streams %d) checked=%d lost=%d duplicated=%d out_of_order=%d phantom=%d gaps=%d bad_state=%d unanswered=%d (in history %d, absent %d) sessions=%d verified=%d continued=%d\n",
		tests, sum["kills"], sum["sends"], sum["acked"], sum["stream_acked"], sum["checked"], sum["lost"], sum["duplicated"], sum["out_of_order"], sum["phantom"], sum["gaps"], sum["bad_state"],
		sum["unanswered"], sum["unanswered_in_history"], sum["unanswered_absent"], sum["sessions"], sum["verified"], sum["continued"]
}' "$out/summary.txt"
echo "logs: $out"
((failed == 0))
