#!/usr/bin/env bash
# The generated-stub echo example as two processes over rxe.
# Usage: echo_example.sh SERVER_BIN CLIENT_BIN
set -euo pipefail
server=$1 client=$2
: "${ZCRPC_RXE_ADDR0:?run through scripts/rxe-vm (needs Soft-RoCE)}"
out=$(mktemp)
"$server" -a "$ZCRPC_RXE_ADDR0" -p 0 >"$out" 2>&1 &
spid=$!
# shellcheck source=server_process.sh
source "$(dirname "$0")/server_process.sh"
trap 'stop_server; rm -f "$out"' EXIT
for _ in $(seq 100); do
  grep -q '^listening on' "$out" && break
  sleep 0.1
done
port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$out")
[ -n "$port" ] || { echo "server did not start:"; cat "$out"; exit 1; }
got=$("$client" -a "$ZCRPC_RXE_ADDR0" -p "$port" "zero copy")
echo "$got"
grep -qx 'Ping -> "zero copy" seq 42' <<<"$got"
grep -qx 'Reverse -> "ypoc orez"' <<<"$got"
kill -TERM "$spid"
wait "$spid"
