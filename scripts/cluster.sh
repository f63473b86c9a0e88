#!/usr/bin/env bash
# Three NATS JetStream servers and two (or MACPD_NODES) macpd nodes on one
# machine, sharing sessions through MACP_STORE=nats (docs/cluster.md).
#
#   scripts/cluster.sh            # start; Ctrl-C stops everything
#   MACPD_NODES=3 scripts/cluster.sh
#
# Ports: NATS clients 51710-51712, NATS routes 51720-51722, macpd gRPC
# 51730.. (node 0: $MACPD0_ADDR if set), admin/metrics 51740... Other MACP_*
# variables in the environment reach every macpd node. State under
# ${CLUSTER_DIR:-.macp-cluster} (git-ignored). CLUSTER_PRINT_ONLY=1 prints
# the addresses it would use and exits.
# Development only: plaintext and dev identities (MACP_ALLOW_INSECURE=1).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${CLUSTER_DIR:-.macp-cluster}
nodes=${MACPD_NODES:-2}
addrs=()
for ((n = 0; n < nodes; n++)); do
  addr=127.0.0.1:$((51730 + n))
  if [[ $n == 0 && -n ${MACPD0_ADDR:-} ]]; then addr=$MACPD0_ADDR; fi
  addrs+=("$addr")
done
urls="nats://127.0.0.1:51710,nats://127.0.0.1:51711,nats://127.0.0.1:51712"
print_addrs() {
  for ((n = 0; n < nodes; n++)); do
    echo "macpd node $n: grpc ${addrs[$n]}, metrics http://127.0.0.1:$((51740 + n))/metrics, log $dir/macpd$n.log"
  done
  echo "NATS servers: $urls (logs $dir/nats*.log)"
  local watch=${addrs[0]}
  if ((nodes > 1)); then watch=${addrs[1]}; fi
  echo "try: MACP_ALLOW_INSECURE=1 go run ./cmd/macpctl watch sessions --addr $watch --agent alice &"
  echo "     MACP_ALLOW_INSECURE=1 go run ./cmd/macpctl start --addr ${addrs[0]} --agent coord --participants coord,alice --intent x --ttl 5m"
}
if [[ ${CLUSTER_PRINT_ONLY:-} == 1 ]]; then
  print_addrs
  exit 0
fi
mkdir -p "$dir/bin"
echo "building nats-server and macpd into $dir/bin"
go build -o "$dir/bin/nats-server" github.com/nats-io/nats-server/v2
go build -o "$dir/bin/macpd" ./cmd/macpd

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

routes="nats://127.0.0.1:51720,nats://127.0.0.1:51721,nats://127.0.0.1:51722"
for i in 0 1 2; do
  mkdir -p "$dir/nats$i"
  cat > "$dir/nats$i.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:5171$i
max_payload: 8MB
jetstream {
  store_dir: "$dir/nats$i"
  # fsync every write before it is acknowledged: an acknowledged envelope
  # survives even a power loss of every server (docs/cluster.md).
  sync_interval: always
}
cluster {
  name: macp
  listen: 127.0.0.1:5172$i
  routes: [ $routes ]
}
CONF
  "$dir/bin/nats-server" -c "$dir/nats$i.conf" > "$dir/nats$i.log" 2>&1 &
  pids+=($!)
done
sleep 2
for ((n = 0; n < nodes; n++)); do
  addr=${addrs[$n]}
  MACP_ALLOW_INSECURE=1 MACP_STORE=nats MACP_NATS_URL=$urls MACP_NATS_REPLICAS=3 \
    MACP_BIND_ADDR=$addr MACP_ADMIN_ADDR=127.0.0.1:$((51740 + n)) \
    "$dir/bin/macpd" > "$dir/macpd$n.log" 2>&1 &
  pids+=($!)
done
print_addrs
echo "Ctrl-C stops everything."
wait
