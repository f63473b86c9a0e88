#!/usr/bin/env bash
# Send benchmark with its two ceilings, in one run on one machine (issue #4
# item 9):
#
#   1. the raw sync rate of the disk macpd would write to (cmd/disksync:
#      one fdatasync per append, and one per 64 appends);
#   2. the transport ceiling: cmd/echo-bench (Send answers an ok Ack at
#      once) driven by "macpctl load --transport echo" at 64 concurrent
#      sessions;
#   3. macpd driven by the same client at 1, 16 and 64 concurrent sessions,
#      and one session with 16 concurrent senders.
#
# It prints a table of absolute figures and ratios. macpd takes its store
# settings from the environment (MACP_MEMORY_ONLY, MACP_DATA_DIR, ...);
# MACP_DATA_DIR defaults to a directory next to the disksync file, so a
# durable store is measured on the disk that disksync measured.
#
# Knobs (environment): BENCH_DIR (scratch directory on the disk to
# measure; default .tmp/bench in the repository), BENCH_SECS (seconds per
# load run, default 3), BENCH_DISK_SECS (seconds per disksync setting,
# default 3), BENCH_MESSAGES (messages per session, default 50),
# BENCH_RECORD (disksync record size, default 512).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${BENCH_SECS:-3}
disk_secs=${BENCH_DISK_SECS:-3}
messages=${BENCH_MESSAGES:-50}
record=${BENCH_RECORD:-512}
dir=${BENCH_DIR:-$root/.tmp/bench}
mkdir -p "$dir"
bin=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$bin"
}
trap cleanup EXIT

log() { printf '%s\n' "$*" >&2; }

# jget JSON FIELD: the first numeric or string value of "FIELD" in JSON.
jget() {
	printf '%s' "$1" | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'
}

# div A B [FORMAT]: A/B, or "-" when B is 0 or missing.
div() {
	awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (b + 0 == 0) print "-"; else printf f "\n", a / b }'
}

# wait_for FILE REGEX: wait up to 15s for a line of FILE to match, print
# the first match.
wait_for() {
	for _ in $(seq 150); do
		if m=$(grep -o -m1 -E "$2" "$1" 2>/dev/null); then
			printf '%s\n' "$m"
			return 0
		fi
		sleep 0.1
	done
	log "timed out waiting for /$2/ in $1:"
	cat "$1" >&2
	return 1
}

log "building into $bin ..."
(cd "$root" && go build -o "$bin/" ./cmd/macpd ./cmd/macpctl ./cmd/echo-bench ./cmd/disksync)

log "disksync: ${disk_secs}s per setting in $dir ..."
disk=$("$bin/disksync" --dir "$dir" --duration "${disk_secs}s" --record-size "$record" --group 1,64 --json)
disk1=$(printf '%s\n' "$disk" | sed -n 1p)
disk64=$(printf '%s\n' "$disk" | sed -n 2p)

# load NAME ADDR TRANSPORT ARGS...: one macpctl load run; stores its JSON
# line in results[NAME].
declare -A results
load() {
	local name=$1 addr=$2 transport=$3
	shift 3
	log "load $name: $* (${secs}s) ..."
	local out
	out=$("$bin/macpctl" load --addr "$addr" --insecure --transport "$transport" \
		--duration "${secs}s" --messages "$messages" --json "$@")
	printf '%s\n' "$out" | sed '$d' | sed 's/^/    /' >&2
	results[$name]=$(printf '%s\n' "$out" | tail -1)
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')

# The transport ceiling, measured before and after macpd to expose drift
# (other work on the machine).
"$bin/echo-bench" --addr 127.0.0.1:0 >"$dir/echo.out" 2>&1 &
pids+=($!)
echo_addr=$(wait_for "$dir/echo.out" '127\.0\.0\.1:[0-9]+')
load echo64a "$echo_addr" echo --concurrency 64

# macpd.
export MACP_ALLOW_INSECURE=1 MACP_BIND_ADDR=127.0.0.1:0 MACP_LOG_LEVEL=info MACP_LOG_FORMAT=text
# The load generator is one sender: lift the per-sender rate limits.
export MACP_SESSION_START_LIMIT_PER_MINUTE=0 MACP_MESSAGE_LIMIT_PER_MINUTE=0
export MACP_DATA_DIR=${MACP_DATA_DIR:-$dir/macpd-data}
"$bin/macpd" >"$dir/macpd.log" 2>&1 &
pids+=($!)
macpd_addr=$(wait_for "$dir/macpd.log" 'addr=127\.0\.0\.1:[0-9]+' | cut -d= -f2)
store=$(grep -o -m1 -E 'store=[^ ]+' "$dir/macpd.log" | cut -d= -f2 || true)
load c1 "$macpd_addr" macp --concurrency 1
load c16 "$macpd_addr" macp --concurrency 16
load c64 "$macpd_addr" macp --concurrency 64
load s1x16 "$macpd_addr" macp --concurrency 1 --sessions 1 --messages 100000000 --senders 16
load echo64b "$echo_addr" echo --concurrency 64
load_after=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')

row() { # label json-or-empty
	local j=$2
	printf '%-44s %12s %10s %10s %10s %8s\n' "$1" \
		"$(printf '%.0f' "$(jget "$j" throughput_per_s)")" \
		"$(jget "$j" p50_ms)" "$(jget "$j" p99_ms)" "$(jget "$j" p999_ms)" \
		"$(($(jget "$j" errors) + $(jget "$j" rejected)))"
}

cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')
echo
echo "MACP Send benchmark  $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -sm), $cores CPU(s), $(go version | awk '{print $3}')"
echo "macpd store: ${store:-?} (MACP_MEMORY_ONLY=${MACP_MEMORY_ONLY:-<default>}); ${messages} messages per Decision session; ${secs}s per load run; client and server on this machine"
echo "load average before: $load_before, after: $load_after (other work competes for the CPUs when these exceed the CPU count)"
echo
printf '%-44s %12s %10s %10s %10s %8s\n' "scenario" "acked/s" "p50 ms" "p99 ms" "p99.9 ms" "failed"
row "echo-bench, 64 concurrent sessions (before)" "${results[echo64a]}"
row "macpd, 1 session at a time" "${results[c1]}"
row "macpd, 16 concurrent sessions" "${results[c16]}"
row "macpd, 64 concurrent sessions" "${results[c64]}"
row "macpd, 1 session x 16 concurrent senders" "${results[s1x16]}"
row "echo-bench, 64 concurrent sessions (after)" "${results[echo64b]}"
echo
printf '%-44s %12s %10s %10s %10s\n' "disk ($dir, ${record} B records)" "appends/s" "syncs/s" "sync p50" "sync p99"
for d in "$disk1" "$disk64"; do
	printf '%-44s %12.0f %10.0f %10s %10s\n' "  one fdatasync per $(jget "$d" group) append(s)" \
		"$(jget "$d" appends_per_s)" "$(jget "$d" syncs_per_s)" "$(jget "$d" sync_p50_ms)" "$(jget "$d" sync_p99_ms)"
done

t() { jget "${results[$1]}" throughput_per_s; }
echo64=$(awk -v a="$(t echo64a)" -v b="$(t echo64b)" 'BEGIN { print (a + b) / 2 }')
d1=$(jget "$disk1" appends_per_s)
d64=$(jget "$disk64" appends_per_s)
echo
echo "ratios (throughput)"
printf '  %-58s %8s\n' "macpd/echo at 64 sessions (echo: mean of both runs)" "$(div "$(t c64)" "$echo64")"
printf '  %-58s %8s\n' "macpd 1 session / disk one-sync-per-append" "$(div "$(t c1)" "$d1")"
printf '  %-58s %8s\n' "macpd 16 sessions / disk one-sync-per-append" "$(div "$(t c16)" "$d1")"
printf '  %-58s %8s\n' "macpd 64 sessions / disk one-sync-per-append" "$(div "$(t c64)" "$d1")"
printf '  %-58s %8s\n' "macpd 64 sessions / disk 64-appends-per-sync" "$(div "$(t c64)" "$d64")"
printf '  %-58s %8s\n' "1 session x 16 senders / disk one-sync-per-append" "$(div "$(t s1x16)" "$d1")"
printf '  %-58s %8s\n' "1 session x 16 senders / 1 session, 1 sender" "$(div "$(t s1x16)" "$(t c1)")"
printf '  %-58s %8s\n' "p50 latency macpd 1 session / disk sync p50 (one per append)" "$(div "$(jget "${results[c1]}" p50_ms)" "$(jget "$disk1" sync_p50_ms)")"
