#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest (see scripts/demo): the key-value service
# (examples/kv) sharded over three server processes and a client whose
# channel hashes keys over them (docs/balancing.md), over rxe — a few puts,
# gets and scans (merged from every shard), a load run with throughput and
# latency, and a second one during which a shard is killed.
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
# Three shards of one key-value service, each its own process.
ports=(7473 7474 7475)
spids=()
trap 'kill "${spids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
for i in 0 1 2; do
  "$bin/zcrpc_kv_server" -a "$addr" -p "${ports[$i]}" >"$tmp/server$i.log" 2>&1 &
  spids+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 100); do grep -q '^listening' "$tmp/server$i.log" && break; sleep 0.1; done
  sed "s/^/  [shard $i] /" "$tmp/server$i.log"
done
target="ipv4:$addr:7473,$addr:7474,$addr:7475"
s0=$(counter sent_pkts)
snap >"$tmp/counters.before"
echo "demo: the client's channel spans the shards (target $target),"
echo "  consistent hashing on the key: each key lives on one shard"
run() { echo "  \$ zcrpc_kv_client -T \$shards $(printf '%q ' "$@")"; "$bin/zcrpc_kv_client" -T "$target" "$@" 2>&1 | sed 's/^/    /'; }

echo "demo: puts (small values inline, large ones as RDMA attachments)"
run put fruit/apple red
run put fruit/cherry dark-red
run put fruit/banana yellow
run put fruit/fig purple
head -c $((4 << 20)) /dev/urandom >"$tmp/blob"
run put-file blob/4MiB "$tmp/blob"
echo "demo: gets"
run get fruit/banana; echo
echo "  \$ zcrpc_kv_client -T \$shards get blob/4MiB > copy; cmp blob copy"
"$bin/zcrpc_kv_client" -T "$target" get blob/4MiB >"$tmp/copy"
cmp "$tmp/blob" "$tmp/copy" && echo "    4 MiB came back identical"
echo "demo: where the keys live (each shard's own scan)"
for i in 0 1 2; do
  echo "  shard $i: $("$bin/zcrpc_kv_client" -a "$addr" -p "${ports[$i]}" scan "" "" | cut -d' ' -f1 | tr '\n' ' ')"
done
echo "demo: scans go to every shard and come back merged, in key order"
run scan fruit/ fruit0
run scan "" "" 10
echo "demo: delete"
run delete fruit/cherry
run scan fruit/ fruit0
echo "demo: load over the three shards"
run load -n "$calls" -c 16 -s "$size"
echo "demo: load again, and shard 1 killed (SIGKILL) one second into it: its"
echo "  calls in flight fail once, its keys are gone with it (one copy of each"
echo "  key in this example), the other shards' keys are served throughout"
run load -k -n "$calls" -c 16 -s "$size" &
lpid=$!
sleep 1
kill -9 "${spids[1]}"
wait "${spids[1]}" 2>/dev/null || true
echo "  [demo] killed shard 1 (port ${ports[1]})"
wait "$lpid" || true
echo "demo: after the kill: the fruit (those on shard 1 are gone with it), then a"
echo "  scan, which needs every shard and says which one is down"
for k in fruit/apple fruit/banana fruit/fig; do run get "$k" || true; echo; done
run scan fruit/ fruit0 || true
echo "demo: these figures come from a software-emulated guest: QEMU without KVM"
echo "  (TCG, 2 emulated CPUs shared by client, server and the kernel's Soft-RoCE),"
echo "  rdma_rxe on one device ($dev; client and server on one address). They say"
echo "  nothing about RDMA hardware; bench/README.md has zcrpc's ratios to raw verbs"
echo "  (perftest), measured in the same guest in the same run."
kill -TERM "${spids[0]}" "${spids[2]}"
wait "${spids[0]}" "${spids[2]}" || true
trap 'rm -rf "$tmp"' EXIT
for i in 0 2; do tail -n 1 "$tmp/server$i.log" | sed "s/^/  [shard $i] /"; done
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
