#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest (see scripts/demo): the key-value server
# and client (examples/kv) as separate processes over rxe — a few puts,
# gets and scans, then a short load run with throughput and latency.
# Usage: demo-in-guest.sh BIN_DIR CALLS VALUE_SIZE
set -euo pipefail
bin=$1 calls=$2 size=$3
addr=${ZCRPC_RXE_ADDR0:?run through scripts/rxe-vm}
dev=${ZCRPC_RXE_DEV0:-rxe0}
counter() { cat "/sys/class/infiniband/$dev/ports/1/hw_counters/$1" 2>/dev/null || echo 0; }
# rxe's counters of retransmissions, duplicates, sequence and RNR errors: 0
# on a quiet run; when they move, packets were resent (TCG is slow enough
# for rxe's retransmit timer to fire), which shows in the latency tail.
watched="completer_retry_err duplicate_request out_of_seq_request rcvd_seq_err
retry_exceeded_err retry_rnr_exceeded_err rcvd_rnr_err send_rnr_err send_err
link_downed"
snap() { local c; for c in $watched; do echo "$c $(counter "$c")"; done; }

echo "demo: RDMA devices in the guest:"; ibv_devices | sed 's/^/  /'
tmp=$(mktemp -d)
"$bin/zcrpc_kv_server" -a "$addr" -p 7473 >"$tmp/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q '^listening' "$tmp/server.log" && break; sleep 0.1; done
sed 's/^/  [server] /' "$tmp/server.log"
s0=$(counter sent_pkts)
snap >"$tmp/counters.before"
run() { echo "  \$ zcrpc_kv_client $(printf '%q ' "$@")"; "$bin/zcrpc_kv_client" -a "$addr" -p 7473 "$@" 2>&1 | sed 's/^/    /'; }

echo "demo: puts (small values inline, large ones as RDMA attachments)"
run put fruit/apple red
run put fruit/cherry dark-red
run put fruit/banana yellow
head -c $((4 << 20)) /dev/urandom >"$tmp/blob"
run put-file blob/4MiB "$tmp/blob"
echo "demo: gets"
run get fruit/banana; echo
echo "  \$ zcrpc_kv_client get blob/4MiB > copy; cmp blob copy"
"$bin/zcrpc_kv_client" -a "$addr" -p 7473 get blob/4MiB >"$tmp/copy"
cmp "$tmp/blob" "$tmp/copy" && echo "    4 MiB came back identical"
echo "demo: scans (in key order)"
run scan fruit/ fruit0
run scan "" "" 10
echo "demo: delete"
run delete fruit/cherry
run scan fruit/ fruit0
echo "demo: load"
run load -n "$calls" -c 16 -s "$size"
echo "demo: these figures come from a software-emulated guest: QEMU without KVM"
echo "  (TCG, 2 emulated CPUs shared by client, server and the kernel's Soft-RoCE),"
echo "  rdma_rxe on one device ($dev; client and server on one address). They say"
echo "  nothing about RDMA hardware; bench/README.md has zcrpc's ratios to raw verbs"
echo "  (perftest), measured in the same guest in the same run."
kill -TERM $spid
wait $spid || true
trap 'rm -rf "$tmp"' EXIT
tail -n 1 "$tmp/server.log" | sed 's/^/  [server] /'
echo "demo: $dev sent $(( $(counter sent_pkts) - s0 )) packets"
snap >"$tmp/counters.after"
moved=$(awk 'NR == FNR { b[$1] = $2; next }
             $2 != b[$1] { printf "  %s +%d\n", $1, $2 - b[$1] }' \
        "$tmp/counters.before" "$tmp/counters.after")
if [[ -n $moved ]]; then
  echo "demo: $dev counters that moved during the demo (retransmissions, duplicates, RNR):"
  echo "$moved"
else
  echo "demo: $dev retransmission, duplicate and RNR counters did not move"
fi
