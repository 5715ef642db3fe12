# shellcheck shell=bash
# rxe-vm.d/job.sh - what the host hands to guest stage 2: the share (the
# directory mounted read-write at its own path, which must hold the caller's
# cwd) and job.sh, the job file stage2.sh sources: cwd, argv, COMMAND's
# whole environment, whether our stdout/stderr are terminals, and the
# provider (rxe or siw) of the one-guest network.

# Environment for COMMAND in the guest, as NAME=VALUE words.
guest_env() {
    local name
    while read -r name; do
        [[ $name =~ $PASS_ENV_RE ]] || continue
        case $name in ZCRPC_IN_GUEST | ZCRPC_RXE_HOST | ZCRPC_RXE_PROVIDER | ZCRPC_RXE_DEV[01] | ZCRPC_RXE_ADDR[01] | ZCRPC_RXE_ADDR[01]_V6 | ZCRPC_RXE_UNREACHABLE) continue ;; esac
        case $name in ZCRPC_VMCTL | ZCRPC_RXE2_*) continue ;; esac
        printf '%s\0' "$name=${!name}"
    done < <(compgen -e)
    ((${#EXTRA_ENV[@]} == 0)) || printf '%s\0' "${EXTRA_ENV[@]}"
    printf '%s\0' PATH="$GUEST_PATH" HOME=/root USER=root LOGNAME=root ZCRPC_IN_GUEST=1
    if ((TWO)); then
        two_env_words
    else
        rxe_env_words
    fi
}

# --two: what COMMAND (in guest A) learns.  Jobs it runs in guest B with
# rxe-vm-ctl peer-run get SELF and PEER swapped.
two_env_words() {
    printf '%s\0' ZCRPC_VMCTL=/run/rxe-vm/rxe-vm-ctl ZCRPC_RXE2_DEV="$TWO_DEV" \
        ZCRPC_RXE2_ADDR_SELF="$TWO_ADDR_A" ZCRPC_RXE2_ADDR_PEER="$TWO_ADDR_B"
}

# The one-guest network: the provider (rxe, or siw with --siw), its two
# devices and the addresses.
rxe_env_words() {
    printf '%s\0' ZCRPC_RXE_PROVIDER="$PROVIDER" ZCRPC_RXE_DEV0="$DEV0" ZCRPC_RXE_DEV1="$DEV1" \
        ZCRPC_RXE_ADDR0="$ADDR0" ZCRPC_RXE_ADDR1="$ADDR1" \
        ZCRPC_RXE_ADDR0_V6="$ADDR0_V6" ZCRPC_RXE_ADDR1_V6="$ADDR1_V6" \
        ZCRPC_RXE_UNREACHABLE="$UNREACHABLE"
}

# The share directory: --share, else the git toplevel of $PWD, else $PWD.
# Sets SHARE and CWD (both physical paths).
resolve_share() {
    local share=$SHARE_OPT cwd
    cwd=$(pwd -P)
    if [[ -z $share ]]; then
        share=$(git -C "$cwd" rev-parse --show-toplevel 2>/dev/null) || share=$cwd
    fi
    [[ -d $share ]] || die "share $share is not a directory"
    share=$(cd "$share" && pwd -P)
    [[ $share != / ]] || die "cannot share / read-write; use --share DIR"
    [[ $share != *$'\n'* ]] || die "share path contains a newline"
    [[ $cwd == "$share" || $cwd == "$share"/* ]] || die "current directory $cwd is not inside the share $share"
    SHARE=$share
    CWD=$cwd
}

# job.sh for stage 2: FILE CWD OUT_TTY ERR_TTY ARGV... (environment from
# guest_env).
write_job() {
    local file=$1 cwd=$2 out_tty=$3 err_tty=$4 word
    shift 4
    {
        printf 'JOB_CWD=%q\n' "$cwd"
        printf 'JOB_ARGV=('; printf ' %q' "$@"; printf ' )\n'
        printf 'JOB_ENV=('
        while IFS= read -r -d '' word; do printf ' %q' "$word"; done < <(guest_env)
        printf ' )\n'
        printf 'JOB_OUT_TTY=%d\nJOB_ERR_TTY=%d\n' "$out_tty" "$err_tty"
        printf 'JOB_PROVIDER=%q\n' "$PROVIDER"
    } > "$file"
}
