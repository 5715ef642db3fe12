# shellcheck shell=bash
# rxe-vm.d/agent.sh - the guests' side of --two: guest B's agent
# (`rxe-vm --guest-agent CTLDIR`, B's COMMAND), which runs the jobs guest A
# submits with scripts/rxe-vm-ctl, and guest A waiting for that agent before
# COMMAND starts.  The host's side (booting both, serving freeze/link
# requests) is two.sh and scripts/rxe-vm-hostctl.
#
# The control dir (shared by the host and both guests, /run/rxe-vm in the
# guests) holds, besides a/ and b/ (each guest's job, console, status and
# counters):
#   peer/ID/   one job for guest B, written by scripts/rxe-vm-ctl in guest A:
#              cmd (a bash script: cd + exec env -i ... ARGV), then go; the
#              agent renames go to taken, writes pid, and the job's out, err
#              and finally rc; a kill file (a signal name) asks the agent to
#              signal the job's process group (renamed kill.done when sent)
#   host/ID.req  a request for the host (freeze-peer, thaw-peer, link-down,
#              link-up); the host answers in ID.rc (status, then a message)
#   b/ready    guest B's agent is serving; b/shutdown asks it to stop
#   rxe-vm-ctl, rxe-vm-hostctl  copies of the control CLI ($ZCRPC_VMCTL in
#              guest A) and of the host's request server

# Guest A, before COMMAND: wait until guest B's agent serves (or B failed).
wait_for_peer() {
    local ctl=$1 deadline=$((SECONDS + TWO_PEER_WAIT_SECONDS))
    until [[ -e $ctl/b/ready ]]; do
        if [[ -e $ctl/b/setup-error ]]; then
            echo "guest B: $(cat "$ctl/b/setup-error")"
            return 1
        fi
        if [[ -e $ctl/b/status || -e $ctl/b/stage1-error || -e $ctl/stage1-error ]]; then
            echo "guest B stopped before its agent started"
            return 1
        fi
        if ((SECONDS >= deadline)); then
            echo "guest B's agent not ready after ${TWO_PEER_WAIT_SECONDS}s"
            return 1
        fi
        sleep 0.1
    done
}

# Guest B's COMMAND: run the jobs guest A submits until the host asks us to
# stop, then kill what still runs.
guest_agent() {
    local ctl=$1 jobs=$1/peer go d k sig pid nap
    local -A started=()
    # Sleep without forking (a fork costs ~0.1 s under TCG): read with a
    # timeout from a FIFO nobody writes to.
    mkfifo /run/rxe-vm-agent-nap
    exec {nap}<> /run/rxe-vm-agent-nap
    touch "$ctl/b/ready"
    while [[ ! -e $ctl/b/shutdown ]]; do
        for go in "$jobs"/*/go; do
            d=${go%/go}
            [[ -e $go && -z ${started[$d]:-} ]] || continue
            started[$d]=1
            agent_start_job "$d"
        done
        for k in "$jobs"/*/kill; do
            [[ -e $k ]] || continue
            d=${k%/kill}
            read -r sig < "$k" || sig=TERM
            if [[ -e $d/pid && ! -e $d/rc ]]; then
                read -r pid < "$d/pid"
                kill -s "$sig" -- "-$pid" 2> /dev/null || true
            fi
            mv "$k" "$k.done"
        done
        read -r -t 0.02 -u "$nap" _ || true
    done
    for d in "$jobs"/*; do
        [[ -e $d/pid && ! -e $d/rc ]] || continue
        read -r pid < "$d/pid"
        kill -KILL -- "-$pid" 2> /dev/null || true
    done
    wait
}

# One job in its own session (setsid execs in place: its pid is its process
# group, which peer-kill signals), reaped by a subshell that writes rc.
agent_start_job() {
    local d=$1
    (
        setsid bash "$d/cmd" < /dev/null > "$d/out" 2> "$d/err" &
        local p=$! rc=0
        echo "$p" > "$d/pid.tmp"
        mv "$d/pid.tmp" "$d/pid"
        wait "$p" || rc=$?
        echo "$rc" > "$d/rc.tmp"
        mv "$d/rc.tmp" "$d/rc"
    ) &
}
