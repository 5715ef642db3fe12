# shellcheck shell=bash
# rxe-vm.d/rxe.sh - Soft-RoCE setup and the rxe counters, wherever rxe runs:
# the one-guest network (veth0/veth1 with rxe0/rxe1, routed across the pair),
# the --two network in each guest (rxe0 on eth0), the --host teardown, and
# the hw_counter snapshots and their summary line.  Used by guest stage 2
# (stage2.sh) and by --host / direct runs (host.sh).

# Run a command; on failure say which one on stderr.
try() { "$@" || { echo "failed ($?): $*" >&2; return 1; }; }

# The IPv4-mapped GID suffix of a dotted address, e.g. 192.0.2.1 -> ffff:c000:0201.
gid_suffix() {
    local IFS=.
    # shellcheck disable=SC2086
    set -- $1
    printf 'ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4"
}

# True when DEV's port 1 is ACTIVE and has the GID ending in GID_SUFFIX.
# GIDs are added asynchronously after `rdma link add` (roce_gid_mgmt work
# queue), and rdma_cm bind/resolve races with that, so wait for them before
# tests run.
rxe_ready() {
    local port=/sys/class/infiniband/$1/ports/1 state
    read -r state < "$port/state" 2>/dev/null || return 1
    [[ $state == *ACTIVE* ]] || return 1
    # The IPv4 GIDs sit near the front of the 1024-entry table.
    grep -qs -- "$2\$" "$port"/gids/{0..15}
}

# True when every DEV GID pair given is ready (rxe_ready).
rxe_all_ready() {
    while (($#)); do
        rxe_ready "$1" "$2" || return 1
        shift 2
    done
}

# wait_rxe_ready WHAT DEV GID [DEV GID ...]: wait (bounded) until every DEV
# has its GID; on timeout say "WHAT not ready" and show the links and
# addresses on stderr, and fail.
wait_rxe_ready() {
    local what=$1 deadline=$((SECONDS + RXE_WAIT_SECONDS))
    shift
    until rxe_all_ready "$@"; do
        if ((SECONDS >= deadline)); then
            echo "$what not ready after ${RXE_WAIT_SECONDS}s:" >&2
            rdma link show >&2 || true
            ip -br addr >&2 || true
            return 1
        fi
        sleep 0.1
    done
}

# Fail with a message unless every FILE is a character device.
check_char_devs() {
    local f
    for f in "$@"; do
        [[ -c $f ]] || { echo "missing $f" >&2; return 1; }
    done
}

# Create veth0/veth1 with the test addresses and rxe0/rxe1 on them (with
# `cross`: routed across the pair, see route_across_veth), then wait
# (bounded) until both are usable.  Returns non-zero with a message on
# stderr on failure.
setup_rxe() {
    setup_veth_pair || return 1
    try rdma link add "$DEV0" type rxe netdev "$NETDEV0" || return 1
    try rdma link add "$DEV1" type rxe netdev "$NETDEV1" || return 1
    if [[ ${1:-} == cross ]]; then
        route_across_veth || return 1
    fi
    wait_rxe_ready "rxe devices" "$DEV0" "$(gid_suffix "$ADDR0")" "$DEV1" "$(gid_suffix "$ADDR1")" \
        "$DEV0" "$GID0_V6" "$DEV1" "$GID1_V6" || return 1
    check_char_devs /dev/infiniband/uverbs0 /dev/infiniband/uverbs1 /dev/infiniband/rdma_cm
}

# veth0/veth1 up with the test addresses (IPv4 and IPv6), the network both
# setup_rxe and setup_siw (siw.sh) put their devices on.
setup_veth_pair() {
    # Called in `if` / `$(...)` contexts where `set -e` does not apply,
    # hence the explicit checks.
    try ip link set lo up || return 1
    try ip link add "$NETDEV0" type veth peer name "$NETDEV1" || return 1
    try ip addr add "$ADDR0/$PREFIXLEN" dev "$NETDEV0" || return 1
    try ip addr add "$ADDR1/$PREFIXLEN" dev "$NETDEV1" || return 1
    try ip -6 addr add "$ADDR0_V6/$PREFIXLEN_V6" dev "$NETDEV0" nodad || return 1
    try ip -6 addr add "$ADDR1_V6/$PREFIXLEN_V6" dev "$NETDEV1" nodad || return 1
    try ip link set "$NETDEV0" up || return 1
    try ip link set "$NETDEV1" up || return 1
}

# Make traffic between the two local addresses cross the veth pair when the
# sender is bound to the *other* address (guest only: it changes global
# routing rules).  Normally a route to a local address goes via `lo`, and
# rxe drops packets arriving on a netdev without an rxe device, so rdma_cm
# from a process bound to 192.0.2.2 to 192.0.2.1 times out (ADDR_ERROR
# -110).  With these rules a packet from 192.0.2.2 to 192.0.2.1 leaves via
# veth1 (rxe1) and arrives on veth0 (rxe0), and vice versa.  Unbound
# traffic, and traffic from an address to itself, still takes the local
# (loopback) path inside one rxe device.  (bench/run-in-guest.sh reuses
# table 100.)
route_across_veth() {
    local mac0 mac1 conf
    # Packets whose source is one of our own addresses must be accepted.
    for conf in all default "$NETDEV0" "$NETDEV1"; do
        try sysctl -qw "net.ipv4.conf.$conf.accept_local=1" "net.ipv4.conf.$conf.rp_filter=0" || return 1
    done
    # Locally sent packets (iif lo) from one address to the other: look up
    # a table that sends them out of the sender's own veth ...
    try ip route add "$ADDR0/32" dev "$NETDEV1" table 100 || return 1
    try ip route add "$ADDR1/32" dev "$NETDEV0" table 101 || return 1
    try ip rule add pref 10 iif lo from "$ADDR1" to "$ADDR0" lookup 100 || return 1
    try ip rule add pref 11 iif lo from "$ADDR0" to "$ADDR1" lookup 101 || return 1
    # ... before the local table, which moves from preference 0 to 100
    # (arriving packets still find their local address there).
    try ip rule add pref 100 lookup local || return 1
    try ip rule del pref 0 lookup local || return 1
    # Fixed neighbours: no ARP round trip on the first connection.
    read -r mac0 < "/sys/class/net/$NETDEV0/address"
    read -r mac1 < "/sys/class/net/$NETDEV1/address"
    try ip neigh replace "$ADDR0" lladdr "$mac0" dev "$NETDEV1" nud permanent || return 1
    try ip neigh replace "$ADDR1" lladdr "$mac1" dev "$NETDEV0" nud permanent || return 1
}

# --two, in guest ROLE (a or b): eth0 with the role's address, a fixed
# neighbour entry for the other guest (no ARP: a cut link or a frozen peer
# then cannot make the address unresolvable), rxe0 on eth0, and a bounded
# wait for its IPv4 GID.
setup_two() {
    local role=$1 self peer peer_mac
    if [[ $role == a ]]; then
        self=$TWO_ADDR_A peer=$TWO_ADDR_B peer_mac=$TWO_MAC_B
    else
        self=$TWO_ADDR_B peer=$TWO_ADDR_A peer_mac=$TWO_MAC_A
    fi
    try ip link set lo up || return 1
    [[ -d /sys/class/net/$TWO_NETDEV ]] || { echo "no $TWO_NETDEV (virtio_net)" >&2; return 1; }
    try ip addr add "$self/$PREFIXLEN" dev "$TWO_NETDEV" || return 1
    try ip link set "$TWO_NETDEV" mtu "$TWO_MTU" up || return 1
    try ip neigh replace "$peer" lladdr "$peer_mac" dev "$TWO_NETDEV" nud permanent || return 1
    try rdma link add "$TWO_DEV" type rxe netdev "$TWO_NETDEV" || return 1
    wait_rxe_ready "$TWO_DEV" "$TWO_DEV" "$(gid_suffix "$self")" || return 1
    check_char_devs /dev/infiniband/uverbs0 /dev/infiniband/rdma_cm
}

# Undo setup_rxe (host mode).  `rdma link delete` waits for user contexts
# to close and can block for good, hence the timeout.
teardown_rxe() {
    timeout 10 rdma link delete "$DEV1" 2>/dev/null || true
    timeout 10 rdma link delete "$DEV0" 2>/dev/null || true
    ip link del "$NETDEV0" 2>/dev/null || true
}

# Print "<dev> <counter> <value>" for every hw_counter of rxe0 and rxe1, or
# of the devices given as arguments; with SNAPSHOT_LABEL set (--two), the
# first column reads "<label>/<dev>".  siw has no hw_counters: with --siw
# (and no arguments) the veth and TCP counters instead (siw.sh).
snapshot_counters() {
    local dev f v
    if [[ $PROVIDER == siw ]] && ((!$#)); then
        snapshot_net_counters
        return
    fi
    (($#)) || set -- "$DEV0" "$DEV1"
    for dev in "$@"; do
        for f in /sys/class/infiniband/"$dev"/ports/1/hw_counters/*; do
            [[ -f $f && ${f##*/} != lifespan ]] || continue   # lifespan is a setting
            read -r v < "$f" 2>/dev/null || v='?'
            printf '%s %s %s\n' "${SNAPSHOT_LABEL:+$SNAPSHOT_LABEL/}$dev" "${f##*/}" "$v"
        done
    done
}

# join_counters BEFORE AFTER: "<dev> <counter> <before> <after>" lines.
join_counters() {
    awk 'NR == FNR { b[$1 " " $2] = $3; next }
         { k = $1 " " $2; print $1, $2, ((k in b) ? b[k] : "?"), $3 }' "$1" "$2"
}

# The one-line stderr summary from a joined counters file (every device in
# it, in order): rxe's sent_pkts/rcvd_pkts, or with --siw the veths'
# tx_packets/rx_packets and TCP's OutSegs/InSegs.
print_counter_summary() {
    local names='sent_pkts rcvd_pkts'
    [[ $PROVIDER != siw ]] || names='tx_packets rx_packets OutSegs InSegs'
    awk -v names="$names" '
        !($1 in seen) { seen[$1] = 1; devs[++n] = $1 }
        { v[$1 " " $2] = $3 "->" $4 }
        END {
            m = split(names, name, " ")
            line = "rxe-vm:"
            for (i = 1; i <= n; i++) {
                d = devs[i]
                part = ""
                for (j = 1; j <= m; j++)
                    if ((d " " name[j]) in v) part = part " " name[j] " " v[d " " name[j]]
                if (part == "")   # none of them: say so, as "?"
                    for (j = 1; j <= 2; j++) part = part " " name[j] " ?"
                line = line (i > 1 ? ";" : "") " " d part
            }
            print line
        }' "$1" >&2
}
