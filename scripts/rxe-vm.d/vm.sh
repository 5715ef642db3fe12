# shellcheck shell=bash
# rxe-vm.d/vm.sh - the host side of a guest run: the per-run control dir
# (with the copy of stage 2 the guest runs), streaming the guest's serial
# ports to our stdout/stderr, the pieces of QEMU's command line, reading the
# guest's status back (exit with COMMAND's status, 124 on timeout, 125 with
# the reason when the guest gave none), and run_vm, the one-guest mode.
# two.sh builds --two from the same pieces.

CTL=             # the control dir of this run (9p tag rxectl, /run/rxe-vm in the guest)
QEMU_PID=''      # timeout(1) running QEMU (guest A for --two)
OUT_TTY=0        # is our stdout a terminal (then COMMAND's is one too)
ERR_TTY=0        # is our stderr a terminal
STREAM_PIDS=()   # the cat processes copying the guest's output (start_streams)
KEEP_OUT=''      # our write ends of the output FIFOs (start_streams)
KEEP_ERR=''
QARGV=()         # a QEMU command line being built
APPEND=''        # the guest kernel's command line (kernel_append)
RUN_START=0      # $SECONDS when the first QEMU started

# Escape a value for a QEMU option list (a comma is written ",,").
qemu_escape() { printf '%s' "${1//,/,,}"; }

# new_ctl CLEANUP: create the control dir CTL; CLEANUP runs on exit, and
# INT / TERM / HUP exit (130 / 143) through it.
new_ctl() {
    CTL=$(mktemp -d "${TMPDIR:-/tmp}/rxe-vm.XXXXXX")
    # shellcheck disable=SC2064 # CLEANUP is a function name
    trap "$1" EXIT
    trap 'msg "interrupted"; exit 130' INT
    trap 'msg "terminated"; exit 143' TERM HUP
}

# Put stage 2 and the share path into the control dir, and note whether
# our stdout/stderr are terminals.  The guest runs this copy of rxe-vm and
# rxe-vm.d/, not the originals: their directory need not be visible in the
# guest (a checkout under /tmp or /run is hidden by the guest's tmpfs there
# unless it is the share), and the run keeps the version it started with
# while the checkout changes.
fill_ctl() {
    cp "$SELF" "$CTL/rxe-vm"
    cp -R "$LIB_DIR" "$CTL/rxe-vm.d"
    printf '%s\n' "$SHARE" > "$CTL/share"
    # --siw: the siw modules stage 2 loads (siw.sh's load_siw_modules).
    [[ -z $SIW_DIR ]] || cp -R "$SIW_DIR" "$CTL/siw-modules"
    OUT_TTY=0 ERR_TTY=0
    [[ ! -t 1 ]] || OUT_TTY=1
    [[ ! -t 2 ]] || ERR_TTY=1
}

# Stream DIR/out.fifo and DIR/err.fifo (the guest's ttyS1/ttyS2, COMMAND's
# stdout/stderr) to our stdout/stderr.  We hold a write end of each FIFO
# ourselves (KEEP_OUT, KEEP_ERR; QEMU must not inherit them) so that the
# copiers always see EOF once we close ours, even if QEMU never opened them.
start_streams() {
    local dir=$1
    mkfifo "$dir/out.fifo" "$dir/err.fifo"
    cat "$dir/out.fifo" &
    STREAM_PIDS=($!)
    cat "$dir/err.fifo" >&2 &
    STREAM_PIDS+=($!)
    exec {KEEP_OUT}>"$dir/out.fifo" {KEEP_ERR}>"$dir/err.fifo"
}

# After QEMU exited: close our write ends and let the copiers finish.
end_streams() {
    exec {KEEP_OUT}>&- {KEEP_ERR}>&-
    wait "${STREAM_PIDS[@]}" || true
}

# kernel_append [WORDS]: the guest kernel's command line in APPEND.  quiet
# = loglevel 4: errors and panics still reach console.log, which the user
# sees only on failure (or with --verbose).
kernel_append() {
    APPEND="console=ttyS0 panic=-1 mitigations=off${1:+ $1}"
    ((VERBOSE)) || APPEND+=" quiet"
}

# qemu_base CPUS MEM: start QARGV, the same for every guest.
qemu_base() {
    # shellcheck disable=SC2054 # commas belong to QEMU option lists
    QARGV=(
        qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot
        # /dev/kvm exists but the stock kernel does not boot with it: TCG.
        -accel tcg,thread=multi -cpu max -smp "$1" -m "$2"
    )
}

# qemu_serials CONSOLE OUT ERR: ttyS0, ttyS1, ttyS2 into those files.
qemu_serials() {
    QARGV+=(
        -chardev "file,id=con,path=$(qemu_escape "$1")" -serial chardev:con
        -chardev "file,id=out,path=$(qemu_escape "$2")" -serial chardev:out
        -chardev "file,id=err,path=$(qemu_escape "$3")" -serial chardev:err
    )
}

# The three 9p shares: the host's / read-only, the share, the control dir.
qemu_virtfs() {
    # shellcheck disable=SC2054 # commas belong to QEMU option lists
    QARGV+=(
        -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
        -virtfs "local,path=$(qemu_escape "$SHARE"),mount_tag=share,security_model=none,multidevs=remap"
        -virtfs "local,path=$(qemu_escape "$CTL"),mount_tag=rxectl,security_model=none,multidevs=remap"
    )
}

# show_console_tail DIR [LINES]: the end of DIR/console.log on stderr.
show_console_tail() {
    [[ -s $1/console.log ]] || return 0
    msg "last lines of the guest console:"
    tail -n "${2:-30}" "$1/console.log" | tr -d '\r' | sed 's/^/  | /' >&2
}

# exit_if_timed_out QRC DIR: QEMU's timeout(1) status QRC and no DIR/status
# mean --timeout expired: say so and exit 124.
exit_if_timed_out() {
    if (($1 == 124 || $1 == 137)) && [[ ! -e $2/status ]]; then
        show_console_tail "$2" 20
        msg "error: timed out after ${TIMEOUT}s; QEMU killed"
        exit "$EXIT_TIMEOUT"
    fi
}

# After COMMAND: copy the joined counters to --counters FILE and print the
# summary line.
finish_counters() {
    local joined=$1
    [[ -s $joined ]] || { msg "no rxe counters recorded"; return 0; }
    [[ -z $COUNTERS_FILE ]] || cp "$joined" "$COUNTERS_FILE"
    print_counter_summary "$joined"
}

# exit_with_status STATUS COUNTERS: COMMAND ran to completion; report the
# counters and exit with its status.
exit_with_status() {
    local rc
    rc=$(cat "$1")
    finish_counters "$2"
    ((VERBOSE)) && msg "guest run took $((SECONDS - RUN_START))s"
    exit "$rc"
}

cleanup_vm() {
    [[ -z $QEMU_PID ]] || kill -TERM "$QEMU_PID" 2>/dev/null || true
    [[ -z $CTL ]] || rm -rf "$CTL"
}

# Why the one guest gave no status (QEMU's exit QRC, MEM MiB), in one line.
vm_why_no_status() {
    local qrc=$1 mem=$2 why
    if [[ -s $CTL/setup-error ]]; then
        why=$(cat "$CTL/setup-error")
    elif [[ -s $CTL/stage1-error ]]; then
        why="guest init: $(cat "$CTL/stage1-error")"
    elif ((qrc != 0)); then
        why="QEMU exited with status $qrc: $(tail -n 5 "$CTL/qemu.log")"
    else
        why="the guest stopped before COMMAND finished (no status; QEMU exit 0)"
        if [[ ! -s $CTL/console.log ]]; then
            why+="; the guest console is empty: the kernel died early (memory: ${mem} MiB)"
        elif grep -q 'Kernel panic' "$CTL/console.log"; then
            why+="; $(grep -m 1 -o 'Kernel panic.*' "$CTL/console.log" | tr -d '\r')"
        fi
    fi
    printf '%s\n' "$why"
}

# One guest (the default mode): boot it with COMMAND as its job, stream its
# output, exit with COMMAND's status.
run_vm() {
    prepare_cache
    ((!SIW)) || prepare_siw_cache
    resolve_share

    local mem=${ZCRPC_VM_MEM:-4096} cpus=${ZCRPC_VM_CPUS:-2}
    new_ctl cleanup_vm
    fill_ctl
    write_job "$CTL/job.sh" "$CWD" "$OUT_TTY" "$ERR_TTY" "${ARGV[@]}"
    start_streams "$CTL"

    kernel_append ""
    qemu_base "$cpus" "$mem"
    QARGV+=(-nic none -kernel "$KERNEL_IMAGE" -initrd "$INITRD_IMAGE" -append "$APPEND")
    qemu_serials "$CTL/console.log" "$CTL/out.fifo" "$CTL/err.fifo"
    qemu_virtfs
    RUN_START=$SECONDS
    local qrc=0
    timeout -k 10 "$TIMEOUT" "${QARGV[@]}" < /dev/null > "$CTL/qemu.log" 2>&1 {KEEP_OUT}>&- {KEEP_ERR}>&- &
    QEMU_PID=$!
    wait "$QEMU_PID" || qrc=$?
    QEMU_PID=''
    end_streams

    ((VERBOSE)) && show_console_tail "$CTL" 1000000
    exit_if_timed_out "$qrc" "$CTL"
    if [[ ! -e $CTL/status ]]; then
        local why
        why=$(vm_why_no_status "$qrc" "$mem")
        ((VERBOSE)) || show_console_tail "$CTL" 30
        die "$why"
    fi
    exit_with_status "$CTL/status" "$CTL/counters"
}
