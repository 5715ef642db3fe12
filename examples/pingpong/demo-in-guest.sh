#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest (see scripts/demo): the ping-pong server
# and client as two processes over rxe, with rxe's own packet counters.
# Usage: demo-in-guest.sh BIN_DIR ITERATIONS SIZE
set -euo pipefail
bin=$1 iters=$2 size=$3
addr=${ZCRPC_RXE_ADDR0:?run through scripts/rxe-vm}
dev=${ZCRPC_RXE_DEV0:-rxe0}
counter() { cat "/sys/class/infiniband/$dev/ports/1/hw_counters/$1"; }

echo "demo: RDMA devices in the guest:"; ibv_devices | sed 's/^/  /'
log=$(mktemp)
"$bin/zcrpc_pingpong_server" -a "$addr" -p 7471 -c 1 >"$log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do grep -q '^listening' "$log" && break; sleep 0.1; done
s0=$(counter sent_pkts)
"$bin/zcrpc_pingpong_client" -a "$addr" -p 7471 -n "$iters" -s "$size" | sed 's/^/  [client] /'
wait $spid
sed 's/^/  [server] /' "$log"
echo "demo: $dev sent $(( $(counter sent_pkts) - s0 )) packets for $iters round trips of $size bytes"
