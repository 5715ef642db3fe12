#!/usr/bin/env bash
# Two processes over rxe: the key-value example (examples/kv) end to end.
# Put/get/delete/scan with values of 0 B, 1 B, 4 KiB, 1 MiB and 16 MiB,
# contents compared byte for byte, scan order checked, then a short load
# run that must report non-zero throughput.
# Usage: kv_example_end_to_end.sh SERVER_BIN CLIENT_BIN
set -euo pipefail
server=$1 client=$2
: "${ZCRPC_RXE_ADDR0:?run through scripts/rxe-vm (needs Soft-RoCE)}"
dir=$(mktemp -d)
spid=
# shellcheck source=server_process.sh
source "$(dirname "$0")/server_process.sh"
trap 'stop_server; rm -rf "$dir"' EXIT
"$server" -a "$ZCRPC_RXE_ADDR0" -p 0 >"$dir/server.log" 2>&1 &
spid=$!
for _ in $(seq 100); do
  grep -q '^listening on' "$dir/server.log" && break
  sleep 0.1
done
port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$dir/server.log")
[ -n "$port" ] || { echo "server did not start:"; cat "$dir/server.log"; exit 1; }
kv() { "$client" -a "$ZCRPC_RXE_ADDR0" -p "$port" "$@"; }
fail() { echo "FAIL: $*"; cat "$dir/server.log"; exit 1; }

# put-file / get / cmp for every size, inline and attachment paths.
sizes="0 1 4096 1048576 16777216"
for n in $sizes; do
  head -c "$n" /dev/urandom >"$dir/v$n"
  kv put-file "size-$n" "$dir/v$n"
done
for n in $sizes; do
  kv get "size-$n" >"$dir/got$n"
  cmp "$dir/v$n" "$dir/got$n" || fail "value of $n bytes differs"
  echo "get size-$n: $n bytes, identical"
done
# Replace a large value by a small one and back: Get sees the latest.
kv put size-1048576 small
[ "$(kv get size-1048576)" = small ] || fail "replaced value not seen"
kv put-file size-1048576 "$dir/v1048576"
kv get size-1048576 | cmp - "$dir/v1048576" || fail "re-put value differs"
# put KEY VALUE (a string) round trip.
kv put greeting "hello, rdma"
[ "$(kv get greeting)" = "hello, rdma" ] || fail "string value differs"

# Scan: inserted out of order, listed in order, bounded, limited.
for k in k07 k03 k10 k01 k05 k09 k02 k08 k04 k06; do kv put "$k" "v-$k" >/dev/null; done
kv scan k l >"$dir/scan"
cut -d' ' -f1 "$dir/scan" >"$dir/keys"
printf 'k%02d\n' $(seq 1 10) >"$dir/want"
cmp "$dir/keys" "$dir/want" || { cat "$dir/scan"; fail "scan order"; }
grep -qx 'k03 5 v-k03' "$dir/scan" || fail "scan small value"
kv scan k03 k06 >"$dir/scan2"
[ "$(cut -d' ' -f1 "$dir/scan2" | tr '\n' ' ')" = "k03 k04 k05 " ] || { cat "$dir/scan2"; fail "scan range"; }
kv scan k l 3 >"$dir/scan3"
[ "$(tr '\n' ' ' <"$dir/scan3")" = "k01 5 v-k01 k02 5 v-k02 k03 5 v-k03 (more) " ] || { cat "$dir/scan3"; fail "scan limit"; }
kv scan size- "" >"$dir/scan4"   # "" = no upper bound
[ "$(cut -d' ' -f1 "$dir/scan4" | tr '\n' ' ')" = "size-0 size-1 size-1048576 size-16777216 size-4096 " ] || { cat "$dir/scan4"; fail "scan without an upper bound"; }
grep -qx 'size-16777216 16777216' "$dir/scan4" || { cat "$dir/scan4"; fail "scan of large values"; }
echo "scan: order, range and limit as expected"

# Delete: gone from get and scan; a second delete finds nothing.
for n in $sizes; do kv delete "size-$n"; done
kv delete k05
if kv get size-16777216 >/dev/null 2>&1; then fail "deleted key still found"; fi
if kv delete k05; then fail "second delete succeeded"; fi
kv scan k l | cut -d' ' -f1 | tr '\n' ' ' | grep -qx 'k01 k02 k03 k04 k06 k07 k08 k09 k10 ' || fail "scan after delete"
[ -z "$(kv scan size- size.)" ] || fail "deleted sizes still listed"
echo "delete: ok"

# A short load run: non-zero throughput, no failures, small and large values.
for run in "1000 64" "200 65536"; do
  set -- $run
  kv load -n "$1" -c 16 -s "$2" | tee "$dir/load"
  grep -Eq "^load: $1 calls \\([0-9]+ puts, [1-9][0-9]* gets verified\\) in [0-9.]+ s: [1-9][0-9]* calls/s" "$dir/load" ||
    fail "load: no throughput reported"
  grep -Eq 'p50 [0-9.]+ us, p99 [0-9.]+ us, p99.9 [0-9.]+ us' "$dir/load" || fail "load latency"
done

kill -TERM "$spid"
wait "$spid"
spid=
cat "$dir/server.log"
grep -q 'shut down' "$dir/server.log"
echo "kv example end to end: ok"
