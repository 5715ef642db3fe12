#!/usr/bin/env bash
# gRPC's interop cases over rxe (rdma.interop): starts interop_server on
# $ZCRPC_RXE_ADDR0 port 0, runs interop_client with every case, and wants
# a "PASS name" line for each of them (and no FAIL), then stops the server
# (TERM, wait) and wants its clean shutdown line.
# Usage: run_interop.sh SERVER_BIN CLIENT_BIN
set -euo pipefail
server=$1 client=$2
: "${ZCRPC_RXE_ADDR0:?run through scripts/rxe-vm (needs Soft-RoCE)}"
cases="empty_unary large_unary client_streaming server_streaming ping_pong
empty_stream custom_metadata status_code_and_message special_status_message
unimplemented_method unimplemented_service cancel_after_begin
cancel_after_first_response timeout_on_sleeping_server"
dir=$(mktemp -d)
spid=
# shellcheck source=../rdma/server_process.sh
source "$(dirname "$0")/../rdma/server_process.sh"
trap 'stop_server; rm -rf "$dir"' EXIT
"$server" --host "$ZCRPC_RXE_ADDR0" --port 0 >"$dir/server.log" 2>&1 &
spid=$!
for _ in $(seq 100); do
  grep -q '^listening on' "$dir/server.log" && break
  sleep 0.1
done
port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$dir/server.log")
[ -n "$port" ] || { echo "server did not start:"; cat "$dir/server.log"; exit 1; }

status=0
"$client" --host "$ZCRPC_RXE_ADDR0" --port "$port" --test_case all >"$dir/client.log" 2>&1 || status=$?
cat "$dir/client.log"
bad=0
for c in $cases; do
  grep -qx "PASS $c" "$dir/client.log" || { echo "missing: PASS $c"; bad=1; }
done
if grep -q '^FAIL ' "$dir/client.log"; then bad=1; fi
[ "$status" -eq 0 ] || { echo "client exited $status"; bad=1; }

kill -TERM "$spid"
wait "$spid" || { echo "server exited $?"; bad=1; }
spid=
cat "$dir/server.log"
grep -q '^interop server: shut down' "$dir/server.log" || { echo "no clean shutdown"; bad=1; }
[ "$bad" -eq 0 ] || { echo "interop: FAILED"; exit 1; }
echo "interop: all $(echo $cases | wc -w) cases passed"
