#!/usr/bin/env bash
# The key-value example as a sharded service over rxe (issue 16; examples/kv,
# docs/balancing.md): three server processes, a client channel with
# consistent hashing over them (an ipv4: target). Every key lives on exactly
# one shard (the shards' own scans are disjoint and together hold every
# key); the client's scan merges all shards in key order; a shard killed
# in the middle of a load run: the load goes on (the calls cut fail once,
# its keys are lost with it, the others' keys stay), and later calls of
# the survivors' keys succeed while the dead shard's keys fail cleanly.
# Usage: kv_sharded_end_to_end.sh SERVER_BIN CLIENT_BIN
set -euo pipefail
server=$1 client=$2
addr=${ZCRPC_RXE_ADDR0:?run through scripts/rxe-vm (needs Soft-RoCE)}
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for i in 0 1 2; do sed "s/^/[s$i] /" "$dir/s$i.log"; done; exit 1; }

ports=()
for i in 0 1 2; do
  "$server" -a "$addr" -p 0 >"$dir/s$i.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q '^listening on' "$dir/s$i.log" && break; sleep 0.1; done
  p=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$dir/s$i.log")
  [ -n "$p" ] || fail "server $i did not start"
  ports+=("$p")
done
target="ipv4:$addr:${ports[0]},$addr:${ports[1]},$addr:${ports[2]}"
kv() { "$client" -T "$target" -t 5000 "$@"; }
shard() { local i=$1; shift; "$client" -a "$addr" -p "${ports[$i]}" -t 5000 "$@"; }

# 24 keys through the sharded channel.
for k in $(seq -w 1 24); do kv put "key$k" "value-$k" >/dev/null; done
printf 'key%s\n' $(seq -w 1 24) >"$dir/want"
# Each shard holds some, none holds a key twice, together all of them.
: >"$dir/union"
for i in 0 1 2; do
  shard "$i" scan key kez | cut -d' ' -f1 >"$dir/shard$i"
  n=$(wc -l <"$dir/shard$i")
  echo "shard $i (port ${ports[$i]}) holds $n keys"
  [ "$n" -gt 0 ] || fail "shard $i holds no key: the hash did not spread them"
  cat "$dir/shard$i" >>"$dir/union"
done
sort "$dir/union" | cmp - "$dir/want" || fail "the shards' keys are not each key exactly once"
# The client's scan: all shards merged, in order, limited.
kv scan key kez >"$dir/scan"
grep -q '^(merged from 3 shards)$' "$dir/scan" || { cat "$dir/scan"; fail "scan not fanned out"; }
grep -v '^(' "$dir/scan" | cut -d' ' -f1 | cmp - "$dir/want" || { cat "$dir/scan"; fail "merged scan order"; }
grep -qx 'key07 8 value-07' "$dir/scan" || fail "merged scan value"
[ "$(kv scan key kez 5 | grep -v '^(merged' | tr '\n' ' ')" = \
  "key01 8 value-01 key02 8 value-02 key03 8 value-03 key04 8 value-04 key05 8 value-05 (more) " ] ||
  fail "merged scan limit"
for k in 03 12 24; do [ "$(kv get "key$k")" = "value-$k" ] || fail "get key$k"; done
echo "sharding: every key on one shard, merged scan in order"

# Shard 1 killed in the middle of a load run: the run goes on.
kv load -k -n 6000 -c 16 -s 512 >"$dir/load" 2>&1 &
lpid=$!
sleep 1
kill -9 "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
echo "killed shard 1 (port ${ports[1]}) during the load"
wait "$lpid" || { cat "$dir/load"; fail "load -k exited non-zero"; }
cat "$dir/load"
grep -Eq '^load: 6000 calls' "$dir/load" || fail "the load did not finish its calls"
grep -Eq "^load: shard $addr:${ports[1]}: .*down" "$dir/load" || fail "the killed shard is not shown down"
# Afterwards: the survivors' keys are there; the dead shard's fail cleanly.
for k in $(cat "$dir/shard0" "$dir/shard2" | head -6); do
  [ "$(kv get "$k")" = "value-${k#key}" ] || fail "a survivor's key $k"
done
k=$(head -1 "$dir/shard1")
if kv get "$k" >/dev/null 2>"$dir/err"; then fail "the dead shard's key $k was found"; fi
echo "after the kill: survivors' keys served, the dead shard's key $k not found"
if kv scan key kez >/dev/null 2>"$dir/err"; then fail "a scan with a shard dead succeeded"; fi
grep -q "scan of shard $addr:${ports[1]}: UNAVAILABLE" "$dir/err" || { cat "$dir/err"; fail "scan error"; }
echo "a scan with a shard dead fails naming it: $(cat "$dir/err")"
echo "kv sharded end to end: ok"
