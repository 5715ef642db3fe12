# shellcheck shell=bash
# rxe-vm.d/host.sh - running COMMAND without a VM: directly where rxe0/rxe1
# already exist (inside a guest, e.g. rxe-vm called from COMMAND), or with
# --host on this machine's own kernel (veth pair and rxe set up here by
# rxe.sh, torn down after).

# Run COMMAND here, with rxe0/rxe1 already present (in a guest, or set up by
# run_host).  Keeps existing ZCRPC_RXE_* values.
run_direct() {
    local tmp rc=0
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/rxe-vm.XXXXXX")
    # Called from COMMAND of a --siw guest: its counters are siw's.
    [[ ${ZCRPC_RXE_PROVIDER:-} != siw ]] || use_provider siw
    export ZCRPC_RXE_PROVIDER=${ZCRPC_RXE_PROVIDER:-$PROVIDER}
    export ZCRPC_RXE_DEV0=${ZCRPC_RXE_DEV0:-$DEV0} ZCRPC_RXE_DEV1=${ZCRPC_RXE_DEV1:-$DEV1}
    export ZCRPC_RXE_ADDR0=${ZCRPC_RXE_ADDR0:-$ADDR0} ZCRPC_RXE_ADDR1=${ZCRPC_RXE_ADDR1:-$ADDR1}
    export ZCRPC_RXE_UNREACHABLE=${ZCRPC_RXE_UNREACHABLE:-$UNREACHABLE}
    export ZCRPC_RXE_ADDR0_V6=${ZCRPC_RXE_ADDR0_V6:-$ADDR0_V6} ZCRPC_RXE_ADDR1_V6=${ZCRPC_RXE_ADDR1_V6:-$ADDR1_V6}
    local kv
    for kv in "${EXTRA_ENV[@]}"; do export "${kv?}"; done
    snapshot_counters > "$tmp/before"
    "${ARGV[@]}" || rc=$?
    snapshot_counters > "$tmp/after"
    join_counters "$tmp/before" "$tmp/after" > "$tmp/counters"
    finish_counters "$tmp/counters"
    rm -rf "$tmp"
    return "$rc"
}

# --host: Soft-RoCE on this machine's own kernel (best effort).
run_host() {
    local m
    for m in rdma_rxe rdma_ucm ib_uverbs crc32_generic veth; do
        timeout 30 modprobe "$m" 2>/dev/null ||
            die "--host: this kernel ($(uname -r)) cannot load $m; run without --host to use a VM"
    done
    for m in "$NETDEV0" "$NETDEV1"; do
        ! ip link show "$m" > /dev/null 2>&1 || die "--host: $m already exists"
    done
    trap teardown_rxe EXIT
    local err
    err=$(setup_rxe 2>&1) || die "--host: rxe setup failed: $err"
    local rc=0
    run_direct || rc=$?
    exit "$rc"
}
