# shellcheck shell=bash
# rxe-vm.d/common.sh - what every part of scripts/rxe-vm shares: the exit
# codes, the test network of both modes (one guest with rxe0/rxe1 on a veth
# pair, or siw0/siw1 with --siw; --two with rxe0 on eth0 in each guest),
# the guest's kernel modules, what reaches COMMAND's environment, and
# msg/die.  Sourced by scripts/rxe-vm (on the host and, as the control dir's
# copy, in the guest).

readonly EXIT_HARNESS=125   # harness failure (no boot, no rxe, bad usage)
readonly EXIT_TIMEOUT=124   # --timeout expired

# The test network, identical in every mode.  The RDMA devices on the veth
# pair are Soft-RoCE by default, Soft-iWARP with --siw (use_provider).
PROVIDER=rxe DEV0=rxe0 DEV1=rxe1
readonly NETDEV0=veth0 NETDEV1=veth1
readonly ADDR0=192.0.2.1 ADDR1=192.0.2.2 UNREACHABLE=192.0.2.99 PREFIXLEN=24
# IPv6 documentation prefix; GIDs as they appear in sysfs.
readonly ADDR0_V6=2001:db8::1 ADDR1_V6=2001:db8::2 PREFIXLEN_V6=64
readonly GID0_V6=2001:0db8:0000:0000:0000:0000:0000:0001
readonly GID1_V6=2001:0db8:0000:0000:0000:0000:0000:0002
readonly RXE_WAIT_SECONDS=20

# use_provider rxe|siw: the link type and device names of the one-guest
# network (rxe0/rxe1, or siw0/siw1 for --siw), in PROVIDER, DEV0, DEV1.
use_provider() {
    case $1 in
        rxe) PROVIDER=rxe DEV0=rxe0 DEV1=rxe1 ;;
        siw) PROVIDER=siw DEV0=siw0 DEV1=siw1 ;;
        *) die "unknown provider $1" ;;
    esac
}

# Guest kernel modules; the initramfs also gets everything they depend on
# (ib_core, ib_cm, rdma_cm, 9pnet, virtio, ...), loaded in dependency order.
# crc32_generic: without it rdma_rxe fails with "failed to init crc32 algorithm".
# sch_netem: `tc qdisc add dev veth1 root netem loss 20%` for loss tests.
# virtio_net: eth0 of --two; nf_tables: `nft` drop rules in --two tests.
readonly GUEST_MODULES=(virtio_pci 9pnet_virtio 9p veth crc32_generic ib_uverbs rdma_rxe rdma_ucm sch_netem
    virtio_net nf_tables)

# --two: guests A and B, each with eth0 on one QEMU socket link and rxe0 on
# it.  A runs COMMAND; B runs an agent that executes what A asks for.
readonly TWO_DEV=rxe0 TWO_NETDEV=eth0
readonly TWO_ADDR_A=192.0.2.1 TWO_ADDR_B=192.0.2.2
readonly TWO_MAC_A=52:54:00:12:34:01 TWO_MAC_B=52:54:00:12:34:02
readonly TWO_PEER_WAIT_SECONDS=180
# Jumbo frames on eth0, so rxe0's active MTU is 4096 (as RoCE deployments
# run): a 256 KiB message is 64 packets, not 256 (rxe counts every
# NAK-sequence retransmission against retry_count until the next ACK).
readonly TWO_MTU=9000

# Host variables passed through to COMMAND in the guest (if set).
readonly PASS_ENV_RE='^(ZCRPC_[A-Za-z0-9_]*|ASAN_OPTIONS|UBSAN_OPTIONS|LSAN_OPTIONS|CTEST_OUTPUT_ON_FAILURE|GTEST_[A-Za-z0-9_]*|TERM)$'
readonly GUEST_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

msg() { printf 'rxe-vm: %s\n' "$*" >&2; }
die() { msg "error: $*"; exit "$EXIT_HARNESS"; }
