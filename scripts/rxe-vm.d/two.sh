# shellcheck shell=bash
# rxe-vm.d/two.sh - the host side of --two: boot guests A and B joined by a
# QEMU socket link on 127.0.0.1 (A listens, B connects), serve their
# freeze/link requests over QMP (scripts/rxe-vm-hostctl), run COMMAND in A,
# then stop B and report A's status.  Built from vm.sh's pieces; the guests'
# side is stage2.sh (roles a and b) and agent.sh.

QEMU_B_PID=''    # timeout(1) running guest B's QEMU
HOSTCTL_PID=''   # rxe-vm-hostctl serve
B_RC=0           # guest B's QEMU exit status (two_stop_b)

# A free TCP port on 127.0.0.1 for the guests' socket link.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# QMP on the host: `qmp SOCKET COMMAND [JSON-ARGUMENTS]`.
qmp() { python3 "$CTL/rxe-vm-hostctl" qmp "$@"; }

cleanup_vm2() {
    local p
    for p in "$QEMU_PID" "$QEMU_B_PID" "$HOSTCTL_PID"; do
        [[ -z $p ]] || kill -TERM "$p" 2>/dev/null || true
    done
    # timeout(1) forwards TERM to QEMU (and KILLs it 10 s later if need
    # be): wait for both, bounded.
    for p in "$QEMU_PID" "$QEMU_B_PID"; do
        [[ -n $p ]] || continue
        local t
        for ((t = 0; t < 150; t++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    done
    [[ -z $CTL ]] || rm -rf "$CTL"
}

# Explain why guest ROLE (a or b) gave no status, in one line.
why_no_status() {
    local role=$1 qrc=$2 d=$CTL/$1
    if [[ -s $d/setup-error ]]; then
        cat "$d/setup-error"
    elif grep -q 'Kernel panic' "$d/console.log" 2>/dev/null; then
        echo "guest ${role^^}: $(grep -m 1 -o 'Kernel panic.*' "$d/console.log" | tr -d '\r')"
    elif [[ -s $d/stage1-error ]]; then
        echo "guest ${role^^} init: $(cat "$d/stage1-error")"
    elif [[ -s $CTL/stage1-error ]]; then
        echo "guest init: $(cat "$CTL/stage1-error")"
    elif ((qrc != 0)); then
        echo "QEMU (guest ${role^^}) exited with status $qrc: $(tail -n 5 "$d/qemu.log")"
    else
        echo "guest ${role^^} stopped before COMMAND finished (no status; QEMU exit 0)"
    fi
}

# two_argv ROLE MEM NETDEV-ARGS MAC OUT ERR: guest ROLE's QEMU command line
# in QARGV (kernel command line APPEND plus rxevm.role=ROLE).
two_argv() {
    local d=$CTL/$1
    qemu_base 1 "$2"
    QARGV+=(-kernel "$KERNEL_IMAGE" -initrd "$INITRD_IMAGE")
    qemu_virtfs
    # status=off: the guests' carrier stays up when the link is cut
    # (set_link), as behind a switch; packets just stop.
    QARGV+=(-append "$APPEND rxevm.role=$1"
        -netdev "socket,id=n0,$3" -device "virtio-net-pci,netdev=n0,mac=$4,romfile=,status=off"
        -qmp "unix:$(qemu_escape "$d/qmp.sock"),server=on,wait=off")
    qemu_serials "$d/console.log" "$5" "$6"
}

# two_start MEM PORT: start guest A (listening on PORT), then, once A
# listens, guest B (connecting) and the host's request server.
two_start() {
    local mem=$1 port=$2 t
    two_argv a "$mem" "listen=127.0.0.1:$port" "$TWO_MAC_A" "$CTL/a/out.fifo" "$CTL/a/err.fifo"
    timeout -k 10 "$TIMEOUT" "${QARGV[@]}" < /dev/null > "$CTL/a/qemu.log" 2>&1 {KEEP_OUT}>&- {KEEP_ERR}>&- &
    QEMU_PID=$!
    # B connects once A listens (a probe connection would be taken for B).
    for ((t = 0; t < 100; t++)); do
        [[ -z $(ss -Hltn "sport = :$port" 2>/dev/null) ]] || break
        kill -0 "$QEMU_PID" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]] ||
        die "guest A's QEMU does not listen on 127.0.0.1:$port: $(tail -n 5 "$CTL/a/qemu.log")"
    two_argv b "$mem" "connect=127.0.0.1:$port" "$TWO_MAC_B" "$CTL/b/out.log" "$CTL/b/err.log"
    timeout -k 10 "$TIMEOUT" "${QARGV[@]}" < /dev/null > "$CTL/b/qemu.log" 2>&1 {KEEP_OUT}>&- {KEEP_ERR}>&- &
    QEMU_B_PID=$!
    python3 "$CTL/rxe-vm-hostctl" serve "$CTL" {KEEP_OUT}>&- {KEEP_ERR}>&- > "$CTL/hostctl.log" 2>&1 &
    HOSTCTL_PID=$!
}

# Stop B once A is done: thaw it and restore the link if a test left them
# so, ask its agent to finish, and give it a bounded time to power off;
# then stop the request server.  Sets B_RC.
two_stop_b() {
    local t
    qmp "$CTL/b/qmp.sock" cont > /dev/null 2>&1 || true
    qmp "$CTL/a/qmp.sock" set_link '{"name": "n0", "up": true}' > /dev/null 2>&1 || true
    qmp "$CTL/b/qmp.sock" set_link '{"name": "n0", "up": true}' > /dev/null 2>&1 || true
    touch "$CTL/b/shutdown"
    for ((t = 0; t < 300; t++)); do
        kill -0 "$QEMU_B_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -TERM "$QEMU_B_PID" 2>/dev/null || true
    B_RC=0
    wait "$QEMU_B_PID" || B_RC=$?
    QEMU_B_PID=''
    kill -TERM "$HOSTCTL_PID" 2>/dev/null || true
    wait "$HOSTCTL_PID" 2>/dev/null || true
    HOSTCTL_PID=''
}

# two_report QRC: after both guests stopped (A's QEMU exit QRC), show what
# --verbose asks for, then exit with COMMAND's status, 124 or 125.
two_report() {
    local qrc=$1 role why
    if ((VERBOSE)); then
        for role in a b; do
            show_console_tail "$CTL/$role" 1000000
        done
        msg "host control requests:"; sed 's/^/  | /' "$CTL/hostctl.log" >&2
    fi
    exit_if_timed_out "$qrc" "$CTL/a"
    if [[ ! -e $CTL/a/status ]]; then
        why=$(why_no_status a "$qrc")
        if ((!VERBOSE)); then
            for role in a b; do
                msg "guest ${role^^}:"
                show_console_tail "$CTL/$role" 30
            done
        fi
        die "$why"
    fi
    [[ -e $CTL/b/status ]] ||
        msg "warning: guest B did not stop cleanly ($(why_no_status b "$B_RC"))"
    cat "$CTL/a/counters" "$CTL/b/counters" > "$CTL/counters" 2>/dev/null || true
    exit_with_status "$CTL/a/status" "$CTL/counters"
}

# --two: boot guests A and B joined by a QEMU socket link, serve their
# control requests, run COMMAND in A, then stop B.
run_vm2() {
    prepare_cache
    resolve_share
    command -v python3 > /dev/null || die "--two needs python3 on the host (QMP)"

    local mem=${ZCRPC_VM_MEM:-4096} port qrc=0
    new_ctl cleanup_vm2
    mkdir -p "$CTL"/{a,b,peer,host}
    fill_ctl
    cp "$SCRIPT_DIR/rxe-vm-ctl" "$CTL/rxe-vm-ctl"
    cp "$SCRIPT_DIR/rxe-vm-hostctl" "$CTL/rxe-vm-hostctl"
    chmod 755 "$CTL/rxe-vm-ctl"
    write_job "$CTL/a/job.sh" "$CWD" "$OUT_TTY" "$ERR_TTY" "${ARGV[@]}"
    write_job "$CTL/b/job.sh" / 0 0 /bin/bash /run/rxe-vm/rxe-vm --guest-agent /run/rxe-vm
    start_streams "$CTL/a"

    # no_timer_check: on a loaded host the kernel's IO-APIC timer check can
    # fail under TCG and panic the boot ("IO-APIC + timer doesn't work").
    kernel_append no_timer_check
    port=$(free_port) || die "no free TCP port for the guest link"
    RUN_START=$SECONDS
    two_start "$mem" "$port"
    wait "$QEMU_PID" || qrc=$?
    QEMU_PID=''
    end_streams
    two_stop_b
    two_report "$qrc"
}
