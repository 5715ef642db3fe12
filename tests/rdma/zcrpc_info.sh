#!/usr/bin/env bash
# zcrpc-info over the guest's devices: both are listed, ACTIVE, with the
# provider and the paths their profile selects (rxe: windows and write with
# immediate; siw: registrations, WRITTEN and the active side first).
# Usage: zcrpc_info.sh ZCRPC_INFO_BIN
set -euo pipefail
bin=$1
: "${ZCRPC_RXE_DEV0:?run through scripts/rxe-vm (needs Soft-RoCE or Soft-iWARP)}"
provider=${ZCRPC_RXE_PROVIDER:-rxe}
out=$("$bin" -v)
echo "$out"
for dev in "$ZCRPC_RXE_DEV0" "$ZCRPC_RXE_DEV1"; do
  block=$(awk -v d="$dev" '$0 == d { on = 1; next } /^[^ ]/ { on = 0 } on' <<<"$out")
  [ -n "$block" ] || { echo "FAIL: $dev not listed"; exit 1; }
  grep -q "provider: *$provider " <<<"$block" || { echo "FAIL: $dev provider"; exit 1; }
  grep -q "port 1: *ACTIVE" <<<"$block" || { echo "FAIL: $dev port not ACTIVE"; exit 1; }
  if [ "$provider" = siw ]; then
    grep -q "grants: *registrations" <<<"$block" || { echo "FAIL: $dev grants"; exit 1; }
    grep -q "bulk ends: *RDMA WRITE + WRITTEN" <<<"$block" || { echo "FAIL: $dev bulk"; exit 1; }
    grep -q "first send: *the active side" <<<"$block" || { echo "FAIL: $dev first"; exit 1; }
  elif [ -z "${ZCRPC_DEVICE_CAPS:-}" ]; then
    grep -q "grants: *type-2 memory windows" <<<"$block" || { echo "FAIL: $dev grants"; exit 1; }
    grep -q "bulk ends: *RDMA WRITE with immediate" <<<"$block" || { echo "FAIL: $dev bulk"; exit 1; }
  fi
done
echo "zcrpc-info: both devices as expected"
