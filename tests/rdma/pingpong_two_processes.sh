#!/usr/bin/env bash
# Two processes over rxe: the ping-pong example's server and client.
# Usage: pingpong_two_processes.sh SERVER_BIN CLIENT_BIN
set -euo pipefail
server=$1 client=$2
: "${ZCRPC_RXE_ADDR0:?run through scripts/rxe-vm (needs Soft-RoCE)}"
out=$(mktemp)
# shellcheck source=server_process.sh
source "$(dirname "$0")/server_process.sh"
trap 'stop_server; rm -f "$out"' EXIT
"$server" -a "$ZCRPC_RXE_ADDR0" -p 0 -c 1 >"$out" 2>&1 &
spid=$!
for _ in $(seq 100); do
  grep -q '^listening on' "$out" && break
  sleep 0.1
done
port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$out")
[ -n "$port" ] || { echo "server did not start:"; cat "$out"; exit 1; }
"$client" -a "$ZCRPC_RXE_ADDR0" -p "$port" -n 1000 -s 256
wait "$spid"
cat "$out"
grep -q 'echoed 1000 messages, 256000 bytes' "$out"
