#!/usr/bin/env bash
# Send benchmark with its two ceilings, in one run on one machine (issue
# #4), repeated in rounds so that a noisy machine shows its spread:
#
#   1. the raw sync rate of the disk macpd writes to (cmd/disksync: one
#      fdatasync per append, and one per 64 appends);
#   2. the transport ceiling: cmd/echo-bench (Send answers an ok Ack at
#      once) driven by "macpbench load --transport echo" at 64 concurrent
#      sessions;
#   3. macpd driven by the same client at 1, 16 and 64 concurrent sessions,
#      and one session with 16 concurrent senders;
#   4. the floor for any durable server on this machine: echo-bench
#      --durable (each Send appended to a log and answered after a group
#      fdatasync, nothing validated or indexed), driven like macpd at 64
#      concurrent sessions and one session with 16 senders. Its ratios to
#      the other ceilings say how far the targets are from what this
#      machine allows at all; macpd's ratios to it say what macpd adds;
#   5. the one-sync-per-message server: echo-bench --durable --sync-each
#      (each Send written and synced on its own, one at a time), with one
#      session and 16 senders: what group commit is measured against in
#      the second reading of the 16-sender target;
#   6. macpd with pipelined StreamSession calls ("macpbench load --stream"):
#      64 concurrent sessions, one stream each, up to 64 envelopes in
#      flight per stream, each acknowledged by its echo on the stream, which
#      the runtime sends only once the envelope is durable;
#   7. an outside anchor when Debian's redis-server and redis-benchmark are
#      installed (and redis-cli): Redis with appendonly yes and appendfsync always (a
#      durable append per write, group-synced per event-loop turn), on a
#      free port with its data in BENCH_DIR, driven by "redis-benchmark -t
#      rpush -c 64" (64 clients, one request in flight each, values of
#      BENCH_REDIS_VALUE bytes, default 150, about a load envelope). Without
#      them the script runs and says the anchor was absent;
#   8. fan-out ("macpbench fanout"): one session driven by 8 concurrent
#      unary senders with BENCH_FANOUT passive StreamSession subscribers
#      (default 1000, spread over 20 connections; 0 skips it) attached,
#      BENCH_FANOUT_MESSAGES envelopes (default 500) after a warm-up; every
#      subscriber must receive every envelope once, in the same order. It
#      reports macpd's CPU time per delivered envelope (envelopes x
#      subscribers). With BENCH_BASE=<commit>, that commit's macpd is built
#      in a temporary git worktree and measured the same way in every
#      round, alternating which goes first, beside this checkout's;
#   9. before round 1, an untimed warm-up of macpd (below) so that it is
#      measured in its steady state, as the durable echo is.
#
# Every round measures all of them, in that order, so each round's ratios
# compare figures taken minutes apart. The report gives, per figure, the
# median over the rounds and the range [min-max]; each ratio is computed
# within each round, then its median and range are given. It also reports
# the CPU time per acknowledged Send of each server process and of the
# client (from /proc/PID/stat and /usr/bin/time), which says what bounds a
# CPU-bound run.
#
# macpd takes its store settings from the environment (MACP_MEMORY_ONLY,
# MACP_DATA_DIR, GOGC, ...); MACP_DATA_DIR defaults to a fresh directory
# next to the disksync file, so a durable store is measured on the disk
# that disksync measured. One macpd serves every round (its store grows).
# macpd and echo-bench bind free ports on 127.0.0.1.
#
# Knobs (environment): BENCH_DIR (scratch directory on the disk to
# measure; default .tmp/bench in the repository), BENCH_ROUNDS (default
# 3), BENCH_SECS (seconds per load run, default 3), BENCH_DISK_SECS
# (seconds per disksync setting, default 2), BENCH_MESSAGES (messages per
# session, default 50), BENCH_RECORD (disksync record size, default 512),
# BENCH_RAW=1 to also print every round's figures, BENCH_WINDOW (stream
# window, default 64), BENCH_SHORT=1 for a quick run (1 round, 1 s per load
# run and disk setting unless set otherwise), BENCH_FANOUT,
# BENCH_FANOUT_MESSAGES and BENCH_BASE (point 8), BENCH_ONLY=fanout to run
# only point 8 (without the warm-up), BENCH_WARM_WAL_MB (MiB of WAL macpd
# writes in the untimed warm-up of point 9, default 192; 0: none).
#
# The report ends with one machine-readable line per ratio, "ratio NAME
# VALUE" (VALUE: the median over the rounds of the per-round ratio of
# throughputs, or NA when a side was not measured): stream64/echo64,
# stream64/floor64, stream64/redis64, send64/echo64, send64/floor64,
# send1x16/floor1x16 (send: unary Send; floor: the durable echo; redis: the
# Redis anchor); with BENCH_BASE also fanoutN-cpu/base (macpd's CPU per
# delivered envelope with N subscribers, this checkout over the base
# commit; lower is better).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
short=${BENCH_SHORT:-}
rounds=${BENCH_ROUNDS:-${short:+1}}
rounds=${rounds:-3}
secs=${BENCH_SECS:-${short:+1}}
secs=${secs:-3}
disk_secs=${BENCH_DISK_SECS:-${short:+1}}
disk_secs=${disk_secs:-2}
window=${BENCH_WINDOW:-64}
redis_value=${BENCH_REDIS_VALUE:-150}
messages=${BENCH_MESSAGES:-50}
record=${BENCH_RECORD:-512}
fanout=${BENCH_FANOUT:-1000}
fanout_messages=${BENCH_FANOUT_MESSAGES:-500}
base=${BENCH_BASE:-}
only=${BENCH_ONLY:-}
case "$only" in "" | fanout) ;; *)
	echo "BENCH_ONLY is empty or fanout, not $only" >&2
	exit 2
	;;
esac
if [ "$only" = fanout ] && [ "$fanout" = 0 ]; then
	echo "BENCH_ONLY=fanout needs BENCH_FANOUT > 0" >&2
	exit 2
fi
dir=${BENCH_DIR:-$root/.tmp/bench}
mkdir -p "$dir"
res=$(mktemp -d "$dir/results.XXXXXX")
bin=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ -n "${base_tree:-}" ]; then git -C "$root" worktree remove --force "$base_tree" 2>/dev/null || true; fi
	rm -rf "$bin"
}
trap cleanup EXIT

log() { printf '%s\n' "$*" >&2; }

# jget JSON FIELD: the first numeric or string value of "FIELD" in JSON.
jget() {
	printf '%s' "$1" | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'
}

# cpu_ticks PID: user+system CPU time of PID in clock ticks.
cpu_ticks() {
	sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)

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
(cd "$root" && go build -o "$bin/" ./cmd/macpd ./cmd/macpbench ./cmd/echo-bench ./cmd/disksync)
base_tree=
if [ -n "$base" ] && [ "$fanout" != 0 ]; then
	base_tree=$(mktemp -d)
	rmdir "$base_tree"
	log "building macpd of BENCH_BASE=$base in a temporary worktree ..."
	git -C "$root" worktree add --detach "$base_tree" "$base" >/dev/null
	mkdir -p "$bin/base"
	(cd "$base_tree" && go build -o "$bin/base/" ./cmd/macpd)
	base_rev=$(git -C "$base_tree" rev-parse --short HEAD)
fi

# put NAME ROUND FIELD VALUE: one figure of one round.
put() { printf '%s\n' "$4" >"$res/$1.$2.$3"; }
get() { cat "$res/$1.$2.$3" 2>/dev/null || true; }

# load NAME ROUND PID ADDR TRANSPORT ARGS...: one macpbench load run against
# the server process PID; records throughput, latency and CPU per ack.
load() {
	local name=$1 round=$2 pid=$3 addr=$4 transport=$5
	shift 5
	log "round $round: load $name: $* (${secs}s) ..."
	local out c0 c1 acked
	c0=$(cpu_ticks "$pid")
	out=$(/usr/bin/time -f '%U %S' -o "$res/time.$name.$round" "$bin/macpbench" load --addr "$addr" --insecure \
		--transport "$transport" --duration "${secs}s" --messages "$messages" --json "$@")
	c1=$(cpu_ticks "$pid")
	[ -n "${BENCH_RAW:-}" ] && printf '%s\n' "$out" | sed '$d' | sed 's/^/    /' >&2
	local j
	j=$(printf '%s\n' "$out" | tail -1)
	acked=$(jget "$j" acked)
	put "$name" "$round" tput "$(jget "$j" throughput_per_s)"
	put "$name" "$round" p50 "$(jget "$j" p50_ms)"
	put "$name" "$round" p99 "$(jget "$j" p99_ms)"
	put "$name" "$round" failed "$(($(jget "$j" errors) + $(jget "$j" rejected)))"
	put "$name" "$round" srvcpu "$(awk -v c="$((c1 - c0))" -v hz="$hz" -v n="$acked" 'BEGIN { if (n > 0) printf "%.1f", c / hz / n * 1e6 }')"
	put "$name" "$round" clicpu "$(awk -v n="$acked" '{ if (n > 0) printf "%.1f", ($1 + $2) / n * 1e6 }' "$res/time.$name.$round")"
}

# fanout NAME ROUND PID ADDR: one "macpbench fanout" run against the macpd
# process PID; records its CPU per delivered envelope (macpbench reads
# /proc/PID/stat) and the deliveries per second.
fanout_run() {
	local name=$1 round=$2 pid=$3 addr=$4 out j
	log "round $round: fanout $name: $fanout subscribers, $fanout_messages envelopes ..."
	out=$("$bin/macpbench" fanout --addr "$addr" --insecure --pid "$pid" --subscribers "$fanout" \
		--messages "$fanout_messages" --json)
	[ -n "${BENCH_RAW:-}" ] && printf '%s\n' "$out" | sed '$d' | sed 's/^/    /' >&2
	j=$(printf '%s\n' "$out" | tail -1)
	put "$name" "$round" tput "$(jget "$j" deliveries_per_s)"
	put "$name" "$round" srvcpu "$(jget "$j" server_cpu_us_per_delivery)"
}

# free_port: a TCP port nothing listens on now (the kernel's choice).
free_port() {
	if command -v python3 >/dev/null; then
		python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
	else
		echo $((20000 + RANDOM % 40000))
	fi
}

# The Redis anchor (point 7), when Redis is installed.
redis_pid= redis_port= redis_why=
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null || ! command -v redis-cli >/dev/null; then
	redis_why="redis-server, redis-benchmark and redis-cli are not all installed (apt-get install redis-server redis-tools)"
else
	mkdir -p "$dir/redis"
	rm -f "$dir/redis/"*.aof "$dir/redis/appendonlydir/"* 2>/dev/null || true
	for _ in 1 2 3 4 5; do
		redis_port=$(free_port)
		redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir/redis" --appendonly yes --appendfsync always \
			--save '' --daemonize no --logfile "$dir/redis.log" &
		redis_pid=$!
		for _ in $(seq 50); do
			[ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && break
			kill -0 "$redis_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$redis_pid" 2>/dev/null; then
			pids+=($redis_pid)
			break
		fi
		redis_pid=
	done
	[ -n "$redis_pid" ] || redis_why="redis-server did not start (see $dir/redis.log)"
fi
redis_n=

# redis NAME ROUND: one redis-benchmark RPUSH run (64 clients) against the
# Redis anchor, sized to take about BENCH_SECS (from a calibration run).
redis() {
	local name=$1 round=$2 out c0 c1 n
	if [ -z "$redis_n" ]; then
		out=$(redis-benchmark -p "$redis_port" -t rpush -c 64 -n 2000 -d "$redis_value" --csv | tail -1)
		n=$(printf '%s' "$out" | cut -d, -f2 | tr -d '"' | cut -d. -f1)
		redis_n=$((${n:-1000} * secs))
		redis_n=$((redis_n < 1000 ? 1000 : redis_n))
	fi
	log "round $round: redis $name: redis-benchmark -t rpush -c 64 -n $redis_n -d $redis_value ..."
	c0=$(cpu_ticks "$redis_pid")
	out=$(/usr/bin/time -f '%U %S' -o "$res/time.$name.$round" redis-benchmark -p "$redis_port" -t rpush -c 64 -n "$redis_n" \
		-d "$redis_value" --csv | tail -1)
	c1=$(cpu_ticks "$redis_pid")
	[ -n "${BENCH_RAW:-}" ] && printf '    %s\n' "$out" >&2
	# "RPUSH","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	local f
	IFS=, read -r -a f <<<"$(printf '%s' "$out" | tr -d '"')"
	put "$name" "$round" tput "${f[1]}"
	put "$name" "$round" p50 "${f[4]}"
	put "$name" "$round" p99 "${f[6]}"
	put "$name" "$round" failed 0
	put "$name" "$round" srvcpu "$(awk -v c="$((c1 - c0))" -v hz="$hz" -v n="$redis_n" 'BEGIN { if (n > 0) printf "%.1f", c / hz / n * 1e6 }')"
	put "$name" "$round" clicpu "$(awk -v n="$redis_n" '{ if (n > 0) printf "%.1f", ($1 + $2) / n * 1e6 }' "$res/time.$name.$round")"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')

"$bin/echo-bench" --addr 127.0.0.1:0 >"$dir/echo.out" 2>&1 &
echo_pid=$!
pids+=($echo_pid)
echo_addr=$(wait_for "$dir/echo.out" '127\.0\.0\.1:[0-9]+')
mkdir -p "$dir/durecho"
"$bin/echo-bench" --addr 127.0.0.1:0 --durable "$dir/durecho" >"$dir/durecho.out" 2>&1 &
durecho_pid=$!
pids+=($durecho_pid)
durecho_addr=$(wait_for "$dir/durecho.out" '127\.0\.0\.1:[0-9]+')
mkdir -p "$dir/durecho-each"
"$bin/echo-bench" --addr 127.0.0.1:0 --durable "$dir/durecho-each" --sync-each >"$dir/durecho-each.out" 2>&1 &
each_pid=$!
pids+=($each_pid)
each_addr=$(wait_for "$dir/durecho-each.out" '127\.0\.0\.1:[0-9]+')

export MACP_ALLOW_INSECURE=1 MACP_BIND_ADDR=127.0.0.1:0 MACP_LOG_LEVEL=info MACP_LOG_FORMAT=text
# The load generator is one sender: lift the per-sender rate limits and
# its cap of OPEN sessions (the default 100 per initiator).
export MACP_SESSION_START_LIMIT_PER_MINUTE=0 MACP_MESSAGE_LIMIT_PER_MINUTE=0 MACP_MAX_OPEN_SESSIONS=0
# Ended sessions leave memory after 1 s (default 5 min), so the warm-up's
# (below) are not resident during the rounds.
export MACP_EVICT_AFTER_MS=1000
if [ -z "${MACP_DATA_DIR:-}" ]; then
	MACP_DATA_DIR=$dir/macpd-data
	rm -rf "$MACP_DATA_DIR"
fi
export MACP_DATA_DIR
admin_addr=127.0.0.1:$(free_port)
MACP_ADMIN_ADDR=$admin_addr "$bin/macpd" >"$dir/macpd.log" 2>&1 &
macpd_pid=$!
pids+=($macpd_pid)
macpd_addr=$(wait_for "$dir/macpd.log" 'serving" addr=127\.0\.0\.1:[0-9]+' | cut -d= -f2)
base_pid= base_addr=
if [ -n "$base_tree" ]; then
	rm -rf "$dir/macpd-base-data"
	base_admin=127.0.0.1:$(free_port)
	MACP_ADMIN_ADDR=$base_admin MACP_DATA_DIR=$dir/macpd-base-data "$bin/base/macpd" >"$dir/macpd-base.log" 2>&1 &
	base_pid=$!
	pids+=($base_pid)
	base_addr=$(wait_for "$dir/macpd-base.log" 'serving" addr=127\.0\.0\.1:[0-9]+' | cut -d= -f2)
fi
store=$(grep -o -m1 -E 'store=[^ ]+' "$dir/macpd.log" | cut -d= -f2 || true)

# Warm-up (point 9): the durable echo overwrites a log it wrote in full
# before serving, so its syncs flush data blocks only. A fresh Pebble
# store appends to new, preallocated WAL files instead, and on ext4 each
# of those syncs also commits the file system's journal (the file grows),
# which costs more CPU and, on a busy disk, several times the latency;
# Pebble recycles a WAL file once its memtable is flushed, and from then on
# overwrites written blocks too (steady state). macpd is therefore loaded
# with pipelined streams, untimed, until it has written BENCH_WARM_WAL_MB
# MiB of WAL (default 192: six 32 MiB memtables), read from its admin
# endpoint, or for at most 180 s; then the script waits (at most 120 s)
# until Pebble has no compaction running, so that the rounds do not start
# in the middle of one the warm-up caused (later compactions, which the
# rounds' writes trigger, merge the warm-up's tables too, as in any store
# that holds data). The warm-up's sessions end (Commitment) and, with
# MACP_EVICT_AFTER_MS=1000 (set above), leave memory: the rounds' resident
# sessions are their own.
# BENCH_WARM_WAL_MB=0 measures the fresh store instead.
warm_mb=${BENCH_WARM_WAL_MB:-192}
# wal_bytes ADMIN: the WAL bytes a macpd has written (empty: none reported).
wal_bytes() {
	curl -s "http://$1/metrics" 2>/dev/null | awk '/^macpd_store_wal_bytes_in_total / { printf "%.0f\n", $2 }'
}
# warm_up NAME ADDR ADMIN: the warm-up of one macpd; prints what it did.
warm_up() {
	local name=$1 addr=$2 admin=$3 t0 t1 busy
	if [ "$warm_mb" = 0 ]; then
		echo "none (BENCH_WARM_WAL_MB=0)"
		return
	fi
	if ! command -v curl >/dev/null; then
		echo "skipped: curl is not installed (fresh store measured)"
		return
	fi
	if [ -z "$(wal_bytes "$admin")" ]; then
		echo "skipped: the store reports no WAL (fresh or memory-only store measured)"
		return
	fi
	t0=$(date +%s)
	while [ "$(wal_bytes "$admin")" -lt $((warm_mb << 20)) ] && [ $(($(date +%s) - t0)) -lt 180 ]; do
		log "warm-up of $name: $(($(wal_bytes "$admin") >> 20)) of $warm_mb MiB of WAL written ..."
		"$bin/macpbench" load --addr "$addr" --insecure --duration 5s --messages "$messages" \
			--concurrency 64 --stream --window "$window" --commit >/dev/null
	done
	t1=$(date +%s)
	log "warm-up of $name: waiting for compactions to finish ..."
	while [ $(($(date +%s) - t1)) -lt 120 ]; do
		busy=$(curl -s "http://$admin/metrics" 2>/dev/null | awk '
			/^macpd_store_compactions_in_progress / { if ($2 + 0 > 0) b = 1 }
			/^macpd_sessions_resident\{state="terminal"\} / { if ($2 + 0 > 0) b = 1 }
			END { print b + 0 }')
		[ "$busy" = 0 ] && break
		sleep 1
	done
	echo "$(($(wal_bytes "$admin") >> 20)) MiB of WAL written in $((t1 - t0)) s, then $(($(date +%s) - t1)) s for compactions (and evictions) to finish"
}
warm_note="none (BENCH_ONLY=fanout)" base_warm_note=
if [ "$only" != fanout ]; then
	warm_note=$(warm_up macpd "$macpd_addr" "$admin_addr")
	if [ -n "$base_pid" ]; then base_warm_note=$(warm_up base "$base_addr" "$base_admin"); fi
fi

for round in $(seq "$rounds"); do
	if [ "$fanout" != 0 ]; then
		if [ -n "$base_pid" ] && [ $((round % 2)) = 1 ]; then fanout_run fanoutbase "$round" "$base_pid" "$base_addr"; fi
		fanout_run fanout "$round" "$macpd_pid" "$macpd_addr"
		if [ -n "$base_pid" ] && [ $((round % 2)) = 0 ]; then fanout_run fanoutbase "$round" "$base_pid" "$base_addr"; fi
	fi
	[ "$only" = fanout ] && continue
	log "round $round: disksync ${disk_secs}s per setting in $dir ..."
	disk=$("$bin/disksync" --dir "$dir" --duration "${disk_secs}s" --record-size "$record" --group 1,64 --json)
	for g in 1 64; do
		d=$(printf '%s\n' "$disk" | grep "\"group\":$g,")
		put "disk$g" "$round" tput "$(jget "$d" appends_per_s)"
		put "disk$g" "$round" syncs "$(jget "$d" syncs_per_s)"
		put "disk$g" "$round" p50 "$(jget "$d" sync_p50_ms)"
		put "disk$g" "$round" p99 "$(jget "$d" sync_p99_ms)"
	done
	load echo64 "$round" "$echo_pid" "$echo_addr" echo --concurrency 64
	load c1 "$round" "$macpd_pid" "$macpd_addr" macp --concurrency 1
	load c16 "$round" "$macpd_pid" "$macpd_addr" macp --concurrency 16
	load c64 "$round" "$macpd_pid" "$macpd_addr" macp --concurrency 64
	load s1x16 "$round" "$macpd_pid" "$macpd_addr" macp --concurrency 1 --sessions 1 --messages 100000000 --senders 16
	load decho64 "$round" "$durecho_pid" "$durecho_addr" echo --concurrency 64
	load decho1x16 "$round" "$durecho_pid" "$durecho_addr" echo --concurrency 1 --sessions 1 --messages 100000000 --senders 16
	load each1x16 "$round" "$each_pid" "$each_addr" echo --concurrency 1 --sessions 1 --messages 100000000 --senders 16
	load stream64 "$round" "$macpd_pid" "$macpd_addr" macp --concurrency 64 --stream --window "$window"
	if [ -n "$redis_pid" ]; then redis redis64 "$round"; fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')

# med NAME FIELD [FORMAT]: "median [min-max]" of a figure over the rounds.
med() {
	local f=${3:-%.0f}
	for r in $(seq "$rounds"); do get "$1" "$r" "$2"; done | awk -v f="$f" '
		NF { v[n++] = $1 }
		END {
			if (n == 0) { print "-"; exit }
			for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
			m = (n % 2) ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2
			printf f " [" f "-" f "]\n", m, v[0], v[n - 1]
		}'
}

# ratio NAME FIELD NAME2 FIELD2: per-round NAME.FIELD / NAME2.FIELD2, then
# "median [min-max]".
ratio() {
	for r in $(seq "$rounds"); do
		awk -v a="$(get "$1" "$r" "$2")" -v b="$(get "$3" "$r" "$4")" 'BEGIN { if (a != "" && b + 0 > 0) printf "%.3f\n", a / b }'
	done >"$res/ratio.tmp"
	awk '
		NF { v[n++] = $1 }
		END {
			if (n == 0) { print "-"; exit }
			for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
			m = (n % 2) ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2
			printf "%.2f [%.2f-%.2f]\n", m, v[0], v[n - 1]
		}' "$res/ratio.tmp"
}

# target RATIO-TEXT MIN: "met" or "missed" by the median.
target() {
	awk -v m="${1%% *}" -v t="$2" 'BEGIN { if (m == "-") print "?"; else if (m + 0 >= t) print "met"; else printf "missed (%.0f%% of target)\n", 100 * m / t }'
}

cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')
echo
echo "MACP Send benchmark  $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -sm), $cores CPU(s), $(go version | awk '{print $3}')"
echo "macpd store: ${store:-?} (MACP_MEMORY_ONLY=${MACP_MEMORY_ONLY:-<default>}, GOGC=${GOGC:-<default>}); ${messages} messages per Decision session; stream window ${window}"
echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
echo "${rounds} rounds; ${secs}s per load run, ${disk_secs}s per disk setting; client and servers on this machine"
echo "macpd warm-up (steady state, WAL files recycled): $warm_note"
if [ -n "$base_warm_note" ]; then echo "base macpd warm-up: $base_warm_note"; fi
echo "load average before: $load_before, after: $load_after (other work competes for the CPUs when these exceed the CPU count)"
echo "figures: median [min-max] over the rounds"
if [ "$fanout" != 0 ]; then
	echo
	echo "fan-out: 1 session, 8 unary senders, $fanout passive StreamSession subscribers over 20 connections, $fanout_messages envelopes per run"
	printf '%-40s %22s %22s\n' "macpd" "deliveries/s" "server µs/delivery"
	printf '%-40s %22s %22s\n' "this checkout" "$(med fanout tput)" "$(med fanout srvcpu %.2f)"
	if [ -n "$base_pid" ]; then
		printf '%-40s %22s %22s\n' "base $base_rev (BENCH_BASE=$base)" "$(med fanoutbase tput)" "$(med fanoutbase srvcpu %.2f)"
		printf '  %-56s %18s\n' "server CPU per delivery, this checkout / base" "$(ratio fanout srvcpu fanoutbase srvcpu)"
	fi
fi
if [ -z "$only" ]; then
echo
printf '%-40s %22s %22s %22s %16s %16s\n' "scenario" "acked/s" "p50 ms" "p99 ms" "server µs/ack" "client µs/ack"
row() {
	printf '%-40s %22s %22s %22s %16s %16s\n' "$1" "$(med "$2" tput)" "$(med "$2" p50 %.2f)" "$(med "$2" p99 %.1f)" \
		"$(med "$2" srvcpu %.0f)" "$(med "$2" clicpu %.0f)"
}
row "echo-bench, 64 concurrent sessions" echo64
row "macpd, 1 session at a time" c1
row "macpd, 16 concurrent sessions" c16
row "macpd, 64 concurrent sessions" c64
row "macpd, 1 session x 16 concurrent senders" s1x16
row "durable echo, 64 concurrent sessions" decho64
row "durable echo, 1 session x 16 senders" decho1x16
row "one sync per message, 1 x 16 senders" each1x16
row "macpd, 64 sessions, pipelined streams" stream64
if [ -n "$redis_pid" ]; then
	row "redis RPUSH, appendfsync always, 64 cl." redis64
else
	echo "redis anchor absent: $redis_why"
fi
failed=0
for n in echo64 c1 c16 c64 s1x16 decho64 decho1x16 each1x16 stream64; do
	for r in $(seq "$rounds"); do
		f=$(get "$n" "$r" failed)
		failed=$((failed + ${f:-0}))
	done
done
echo "failed Sends (errors + rejections), all runs: $failed"
echo
printf '%-40s %22s %22s %22s %22s\n' "disk ($dir, ${record} B records)" "appends/s" "syncs/s" "sync p50 ms" "sync p99 ms"
for g in 1 64; do
	printf '%-40s %22s %22s %22s %22s\n' "  one fdatasync per $g append(s)" "$(med "disk$g" tput)" "$(med "disk$g" syncs)" \
		"$(med "disk$g" p50 %.3f)" "$(med "disk$g" p99 %.2f)"
done
echo
echo "ratios (throughput, per round; median [min-max])"
r_echo=$(ratio c64 tput echo64 tput)
r_disk=$(ratio c64 tput disk1 tput)
r_s16=$(ratio s1x16 tput disk1 tput)
printf '  %-56s %18s   target >= 0.75: %s\n' "macpd 64 sessions / echo 64 sessions" "$r_echo" "$(target "$r_echo" 0.75)"
printf '  %-56s %18s   target >= 4: %s\n' "macpd 64 sessions / disk one-sync-per-append" "$r_disk" "$(target "$r_disk" 4)"
printf '  %-56s %18s   target >= 3: %s\n' "1 session x 16 senders / disk one-sync-per-append" "$r_s16" "$(target "$r_s16" 3)"
printf '  %-56s %18s\n' "macpd 1 session / disk one-sync-per-append" "$(ratio c1 tput disk1 tput)"
printf '  %-56s %18s\n' "macpd 16 sessions / disk one-sync-per-append" "$(ratio c16 tput disk1 tput)"
printf '  %-56s %18s\n' "macpd 64 sessions / disk 64-appends-per-sync" "$(ratio c64 tput disk64 tput)"
printf '  %-56s %18s\n' "1 session x 16 senders / 1 session, 1 sender" "$(ratio s1x16 tput c1 tput)"
printf '  %-56s %18s\n' "macpd 64 server CPU per ack / echo server CPU per ack" "$(ratio c64 srvcpu echo64 srvcpu)"
printf '  %-56s %18s\n' "p50 latency macpd 1 session / disk sync p50 (one per append)" "$(ratio c1 p50 disk1 p50)"
echo "  the floor: a durable echo (group fdatasync, nothing else) against the same targets, and macpd against it"
r_decho=$(ratio decho64 tput echo64 tput)
r_ddisk=$(ratio decho64 tput disk1 tput)
r_d16=$(ratio decho1x16 tput disk1 tput)
printf '  %-56s %18s   target >= 0.75: %s\n' "durable echo 64 sessions / echo 64 sessions" "$r_decho" "$(target "$r_decho" 0.75)"
printf '  %-56s %18s   target >= 4: %s\n' "durable echo 64 sessions / disk one-sync-per-append" "$r_ddisk" "$(target "$r_ddisk" 4)"
printf '  %-56s %18s   target >= 3: %s\n' "durable echo 1 x 16 senders / disk one-sync-per-append" "$r_d16" "$(target "$r_d16" 3)"
printf '  %-56s %18s\n' "macpd 64 sessions / durable echo 64 sessions" "$(ratio c64 tput decho64 tput)"
printf '  %-56s %18s\n' "macpd 1 x 16 senders / durable echo 1 x 16 senders" "$(ratio s1x16 tput decho1x16 tput)"
echo "  the 16-sender target read as against a server that syncs each message (echo-bench --durable --sync-each)"
r_each=$(ratio s1x16 tput each1x16 tput)
printf '  %-56s %18s   target >= 3: %s\n' "macpd 1 x 16 senders / one-sync-per-message 1 x 16" "$r_each" "$(target "$r_each" 3)"
printf '  %-56s %18s\n' "one-sync-per-message 1 x 16 / disk one-sync-per-append" "$(ratio each1x16 tput disk1 tput)"
if [ -n "${BENCH_RAW:-}" ]; then
	echo
	echo "raw figures per round (acked/s; disk: appends/s)"
	for n in disk1 disk64 echo64 c1 c16 c64 s1x16 decho64 decho1x16 each1x16 stream64 redis64; do
		printf '  %-8s' "$n"
		for r in $(seq "$rounds"); do printf ' %10s' "$(get "$n" "$r" tput | cut -d. -f1)"; done
		echo
	done
fi
echo "  pipelined StreamSession (window ${window}) against the unary ceilings, the floor and the Redis anchor"
printf '  %-56s %18s\n' "macpd 64 streams / echo 64 sessions" "$(ratio stream64 tput echo64 tput)"
printf '  %-56s %18s\n' "macpd 64 streams / durable echo 64 sessions" "$(ratio stream64 tput decho64 tput)"
printf '  %-56s %18s\n' "macpd 64 streams / macpd 64 sessions (unary Send)" "$(ratio stream64 tput c64 tput)"
if [ -n "$redis_pid" ]; then
	printf '  %-56s %18s\n' "macpd 64 streams / redis RPUSH 64 clients" "$(ratio stream64 tput redis64 tput)"
	printf '  %-56s %18s\n' "macpd 64 sessions (unary) / redis RPUSH 64 clients" "$(ratio c64 tput redis64 tput)"
fi

# Machine-readable: one line per ratio, the median over the rounds.
echo
mline() {
	local v
	v=$(ratio "$2" tput "$3" tput)
	v=${v%% *}
	[ "$v" = "-" ] && v=NA
	echo "ratio $1 $v"
}
mline stream64/echo64 stream64 echo64
mline stream64/floor64 stream64 decho64
mline stream64/redis64 stream64 redis64
mline send64/echo64 c64 echo64
mline send64/floor64 c64 decho64
mline send1x16/floor1x16 s1x16 decho1x16
fi
if [ -n "$base_pid" ]; then
	v=$(ratio fanout srvcpu fanoutbase srvcpu)
	v=${v%% *}
	[ "$v" = "-" ] && v=NA
	[ -n "$only" ] && echo
	echo "ratio fanout$fanout-cpu/base $v"
fi
rm -rf "$res"
