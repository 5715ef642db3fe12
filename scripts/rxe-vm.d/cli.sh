# shellcheck shell=bash
# rxe-vm.d/cli.sh - the command line of scripts/rxe-vm: the --help text
# (the interface other scripts and CI rely on), the option variables and
# their defaults, and parse_args.  Which mode then runs is main's choice, in
# scripts/rxe-vm.

# Options, as parse_args leaves them.
SHARE_OPT='' TIMEOUT=3600 COUNTERS_FILE='' HOST_MODE=0 PREPARE=0 VERBOSE=0 TWO=0 SIW=0
EXTRA_ENV=() ARGV=()

usage() {
    cat <<'EOF'
Usage: scripts/rxe-vm [OPTIONS] [--] COMMAND [ARGS...]
       scripts/rxe-vm --prepare [--siw]

Run COMMAND as root where Soft-RoCE works: by default inside a throwaway QEMU
guest (Debian kernel + rdma_rxe) that runs the host's own binaries from a
read-only 9p mount of the host's /.  COMMAND runs in the caller's directory,
its stdout/stderr are streamed to ours (stdin is /dev/null), and the exit
status of rxe-vm is the exit status of COMMAND.

In the guest: rxe0 on veth0 (192.0.2.1/24) and rxe1 on veth1 (192.0.2.2/24),
both ACTIVE with their IPv4 GIDs present before COMMAND starts (siw0 and
siw1 with --siw); /dev/infiniband/{uverbs0,uverbs1,rdma_cm}; tmpfs on /tmp,
/run, /dev/shm; the share (see --share) read-write at its host path;
everything else is the host's / read-only.  `ulimit -l` is unlimited.

Options:
  --share DIR       host directory mounted read-write in the guest at the same
                    path; must contain the current directory
                    (default: the git toplevel of $PWD, else $PWD)
  --timeout SEC     kill the guest after SEC seconds, boot included; exit 124
                    (default 3600)
  --counters FILE   write every rxe0/rxe1 hw_counter before and after COMMAND
                    to FILE, one line each: "<dev> <counter> <before> <after>"
                    (with --siw: veth0/veth1 tx_/rx_packets and _bytes, and
                    "tcp" ActiveOpens, PassiveOpens, InSegs, OutSegs,
                    RetransSegs from the guest's /proc/net/snmp)
  --env NAME[=VAL]  also pass NAME (from our environment, or set to VAL) to
                    COMMAND; repeatable
  --two             two guests A and B (1 CPU, ZCRPC_VM_MEM each) joined by a
                    QEMU socket link: eth0 192.0.2.1/24 (A) and 192.0.2.2/24
                    (B), MTU 9000, rxe0 on eth0 in each.  COMMAND runs in A;
                    B runs what A asks for through $ZCRPC_VMCTL
                    (scripts/rxe-vm-ctl: peer-run [--bg], peer-wait,
                    peer-kill, peer-out, freeze-peer, thaw-peer, link-down,
                    link-up; `$ZCRPC_VMCTL --help`).  COMMAND gets
                    ZCRPC_VMCTL, ZCRPC_RXE2_DEV=rxe0,
                    ZCRPC_RXE2_ADDR_SELF=192.0.2.1 and
                    ZCRPC_RXE2_ADDR_PEER=192.0.2.2 instead of ZCRPC_RXE_*;
                    --counters lists a/rxe0 and b/rxe0
  --siw             Soft-iWARP instead of Soft-RoCE, in its own guest boot:
                    siw0 on veth0 and siw1 on veth1 (same addresses and
                    routing), ACTIVE, before COMMAND starts; COMMAND gets
                    ZCRPC_RXE_PROVIDER=siw ZCRPC_RXE_DEV0=siw0
                    ZCRPC_RXE_DEV1=siw1.  The siw module is built (~30 s,
                    ~155 MB of Debian packages downloaded) on first use and
                    cached.  Not with --two or --host
  --host            no VM: create the veth pair and rxe0/rxe1 on this host
                    (needs a kernel with rdma_rxe; fails with 125 otherwise)
  --prepare         only fill the cache (kernel package + initramfs; with
                    --siw also the siw module), then exit
  -v, --verbose     boot without "quiet" and show the guest console log
  -h, --help        this text

Environment of COMMAND: ZCRPC_RXE_PROVIDER=rxe ZCRPC_RXE_DEV0=rxe0
  ZCRPC_RXE_DEV1=rxe1 (siw, siw0, siw1 with --siw)
  ZCRPC_RXE_ADDR0=192.0.2.1 ZCRPC_RXE_ADDR1=192.0.2.2
  ZCRPC_RXE_ADDR0_V6=2001:db8::1 ZCRPC_RXE_ADDR1_V6=2001:db8::2 (same veths)
  ZCRPC_RXE_UNREACHABLE=192.0.2.99 (on the subnet, owned by nobody)
  ZCRPC_IN_GUEST=1 HOME=/root PATH=/usr/local/sbin:...:/bin, plus these host
  variables if set: ZCRPC_* ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
  CTEST_OUTPUT_ON_FAILURE GTEST_* TERM.

Settings (environment of rxe-vm):
  ZCRPC_VM_CACHE    cache dir (default ~/.cache/zcrpc-vm)
  ZCRPC_VM_MEM      guest memory in MiB (default 4096)
  ZCRPC_VM_CPUS     guest CPUs (default 2)
  ZCRPC_VM_KERNEL_PKG  kernel package (default: what linux-image-amd64 depends on)
  ZCRPC_RXE_HOST=1  same as --host
  ZCRPC_IN_GUEST=1  (or rxe0 and rxe1 already present) run COMMAND directly

Exit status: that of COMMAND; 124 on timeout; 125 if the harness failed
(download, boot, module build or load, rxe/siw setup) - the message says
which.
EOF
}

parse_args() {
    while (($#)); do
        case $1 in
            -h | --help) usage; exit 0 ;;
            --share) SHARE_OPT=${2?--share needs a directory}; shift ;;
            --share=*) SHARE_OPT=${1#*=} ;;
            --timeout) TIMEOUT=${2?--timeout needs seconds}; shift ;;
            --timeout=*) TIMEOUT=${1#*=} ;;
            --counters) COUNTERS_FILE=${2?--counters needs a file}; shift ;;
            --counters=*) COUNTERS_FILE=${1#*=} ;;
            --env) add_env "${2?--env needs NAME[=VALUE]}"; shift ;;
            --env=*) add_env "${1#*=}" ;;
            --host) HOST_MODE=1 ;;
            --two) TWO=1 ;;
            --siw) SIW=1 ;;
            --prepare) PREPARE=1 ;;
            -v | --verbose) VERBOSE=1 ;;
            --) shift; break ;;
            -*) msg "unknown option $1 (see --help)"; exit "$EXIT_HARNESS" ;;
            *) break ;;
        esac
        shift
    done
    ARGV=("$@")
    [[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive number of seconds"
    if ((SIW)); then
        ((!TWO)) || die "--siw and --two do not go together (--two is rxe only)"
        ((!HOST_MODE)) || die "--siw and --host do not go together (--siw needs the guest's siw module)"
        use_provider siw
    fi
    if [[ -n $COUNTERS_FILE ]]; then
        # Resolve now: the caller's cwd is what the caller meant.
        [[ $COUNTERS_FILE == /* ]] || COUNTERS_FILE=$PWD/$COUNTERS_FILE
        : > "$COUNTERS_FILE" || die "cannot write $COUNTERS_FILE"
    fi
}

# --env NAME=VALUE is taken as is; --env NAME takes NAME from our environment.
add_env() {
    local arg=$1
    [[ ${arg%%=*} =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad --env $arg"
    if [[ $arg == *=* ]]; then
        EXTRA_ENV+=("$arg")
    else
        EXTRA_ENV+=("$arg=${!arg-}")
    fi
}
