# shellcheck shell=bash
# rxe-vm.d/stage2.sh - guest stage 2: `rxe-vm --guest-stage2 CTLDIR`, run by
# the guest's /init (scripts/rxe-vm-init.sh) chrooted in the host's root,
# from the copy of scripts/rxe-vm and rxe-vm.d/ in the control dir.  It reads
# the job the host wrote (job.sh), sets up rxe (rxe.sh), runs COMMAND with
# its output on ttyS1/ttyS2, and leaves counters and the status file in the
# control dir (in a/ or b/ for --two, by the rxevm.role= kernel argument).
# The host side that reads these files is vm.sh / two.sh.

# Progress messages of stage 2 go to the guest console (console.log).
stage2_log() {
    local up
    read -r up _ < /proc/uptime
    echo "rxe-vm-stage2: [$up] $*"
}

STAGE2_DEVS=()   # the rxe devices of this guest (set by stage2_setup_rxe)
JOB_RC=0         # COMMAND's exit status (set by stage2_run_job)

guest_stage2() {
    local ctl=$1 role dir
    export PATH=$GUEST_PATH
    cd /
    # --two boots each guest with rxevm.role=a or b on its command line;
    # each role keeps its files in its own subdirectory of the control dir.
    role=$(sed -n 's/.*rxevm\.role=\([ab]\).*/\1/p' /proc/cmdline)
    dir=$ctl${role:+/$role}
    # Defines JOB_CWD, JOB_ARGV, JOB_ENV, JOB_OUT_TTY, JOB_ERR_TTY.
    # shellcheck disable=SC1091
    source "$dir/job.sh"
    use_provider "${JOB_PROVIDER:-rxe}"

    stage2_log "started${role:+ as guest ${role^^}}"
    stage2_prepare_system "$role"
    stage2_setup_rxe "$ctl" "$dir" "$role" || return 1
    snapshot_counters "${STAGE2_DEVS[@]}" > "$dir/counters.before"
    stage2_log "${STAGE2_DEVS[*]} ready"

    stage2_run_job

    snapshot_counters "${STAGE2_DEVS[@]}" > "$dir/counters.after"
    join_counters "$dir/counters.before" "$dir/counters.after" > "$dir/counters"
    # The status file last: its presence means COMMAND ran to completion.
    echo "$JOB_RC" > "$dir/status.tmp"
    mv "$dir/status.tmp" "$dir/status"
    sync
}

# The guest's system as COMMAND expects it: hostname rxe-vm (rxe-vm-a/-b
# for --two), no locked-memory limit, the /dev links devtmpfs lacks.
stage2_prepare_system() {
    local role=$1
    echo "rxe-vm${role:+-$role}" > /proc/sys/kernel/hostname
    # Root has CAP_IPC_LOCK anyway; this makes the limit itself unlimited too.
    ulimit -l unlimited
    # devtmpfs has no /dev/fd (bash's process substitution needs it).
    [[ -e /dev/fd ]] || ln -s /proc/self/fd /dev/fd
    [[ -e /dev/stdin ]] || ln -s /proc/self/fd/0 /dev/stdin
    [[ -e /dev/stdout ]] || ln -s /proc/self/fd/1 /dev/stdout
    [[ -e /dev/stderr ]] || ln -s /proc/self/fd/2 /dev/stderr
}

# stage2_setup_rxe CTL DIR ROLE: the one-guest network (rxe0/rxe1, or
# siw0/siw1 for --siw, routed across the veth pair) or, for --two, rxe0 on
# eth0 (and in guest A, wait for B's agent).  On failure write
# DIR/setup-error (the host shows it) and fail.
stage2_setup_rxe() {
    local ctl=$1 dir=$2 role=$3 err
    STAGE2_DEVS=("$DEV0" "$DEV1")
    if [[ -n $role ]]; then
        STAGE2_DEVS=("$TWO_DEV")
        export SNAPSHOT_LABEL=$role
        if ! err=$(setup_two "$role" 2>&1); then
            printf 'rxe setup failed in guest %s:\n%s\n' "${role^^}" "$err" > "$dir/setup-error"
            return 1
        fi
        stage2_log "$TWO_DEV on $TWO_NETDEV ready"
        if [[ $role == a ]] && ! err=$(wait_for_peer "$ctl" 2>&1); then
            printf '%s\n' "$err" > "$dir/setup-error"
            return 1
        fi
    elif [[ $PROVIDER == siw ]]; then
        STAGE2_DEVS=()   # snapshot_counters: the veth/TCP counters
        if ! err=$(setup_siw "$ctl/siw-modules" 2>&1); then
            printf 'siw setup failed in the guest:\n%s\n' "$err" > "$dir/setup-error"
            return 1
        fi
    elif ! err=$(setup_rxe cross 2>&1); then
        printf 'rxe setup failed in the guest:\n%s\n' "$err" > "$dir/setup-error"
        return 1
    fi
}

# Run the job: COMMAND (JOB_ARGV with exactly JOB_ENV, in JOB_CWD, stdin
# /dev/null) with its stdout/stderr on ttyS1/ttyS2; set JOB_RC.
stage2_run_job() {
    local out=/dev/ttyS1 errdev=/dev/ttyS2 copiers=()
    # COMMAND's stdout/stderr go to ttyS1/ttyS2.  Raw mode: no \n -> \r\n.
    # If the caller's stream is not a terminal, COMMAND writes into a FIFO
    # that `cat` copies to the serial port, so that isatty() is false in the
    # guest too.
    stty -F /dev/ttyS1 raw -echo
    stty -F /dev/ttyS2 raw -echo
    if [[ $JOB_OUT_TTY != 1 ]]; then
        mkfifo /run/rxe-vm-stdout
        cat /run/rxe-vm-stdout > /dev/ttyS1 &
        copiers+=($!)
        out=/run/rxe-vm-stdout
    fi
    if [[ $JOB_ERR_TTY != 1 ]]; then
        mkfifo /run/rxe-vm-stderr
        cat /run/rxe-vm-stderr > /dev/ttyS2 &
        copiers+=($!)
        errdev=/run/rxe-vm-stderr
    fi

    # COMMAND runs in its own session (setsid execs in place, keeping the
    # pid), so that background processes it leaves behind can be killed as
    # one process group afterwards.
    local pid
    JOB_RC=0
    (
        cd "$JOB_CWD" || { echo "rxe-vm: cannot cd to $JOB_CWD in the guest" >&2; exit "$EXIT_HARNESS"; }
        exec setsid env -i "${JOB_ENV[@]}" "${JOB_ARGV[@]}"
    ) < /dev/null > "$out" 2> "$errdev" &
    pid=$!
    wait "$pid" || JOB_RC=$?
    stage2_log "COMMAND exited with status $JOB_RC"
    kill -TERM -- "-$pid" 2>/dev/null || true

    # Let the copiers drain (bounded: a daemon in another session may still
    # hold the FIFO), then wait until the UARTs have sent everything
    # (stty's tcsetattr(TCSADRAIN)).
    local t
    for ((t = 0; t < 50; t++)); do
        kill -0 "${copiers[@]}" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "${copiers[@]}" 2>/dev/null || true
    stty -F /dev/ttyS1 raw
    stty -F /dev/ttyS2 raw
}
