#!/bin/sh
# rxe-vm-init.sh - /init of the initramfs that scripts/rxe-vm boots (stage 1).
#
# Runs as PID 1 under busybox sh inside the QEMU guest.  It loads the kernel
# modules listed in /modules.list, mounts the host's root filesystem (9p tag
# "hostroot", read-only) at /newroot, gives it fresh proc/sys/dev/tmp/run
# mounts, mounts the per-run control directory (tag "rxectl") at
# /newroot/run/rxe-vm and the writable share (tag "share") at its host path,
# then runs stage 2 (the `rxe-vm --guest-stage2` copy in the control
# directory) chrooted into the host's root, so the guest runs the host's own
# bash, iproute2, rdma-core and test binaries.  When stage 2 returns it syncs
# and powers the guest off.  Stage 2 writes the exit status; if it never gets
# that far, this script leaves its error in /run/rxe-vm/stage1-error.
#
# Everything printed here goes to the guest console (ttyS0), which the host
# keeps in a log file and shows only when something fails.
#
# The initramfs is cached under a hash of this file: editing it makes the next
# `rxe-vm` run rebuild the initramfs.

PATH=/bin
export PATH

NEWROOT=/newroot
CTL=/ctl                         # control dir while still in the initramfs
P9OPTS=trans=virtio,version=9p2000.L,msize=512000

ctl_at=                          # where the control dir is mounted now

log() {
    up=$(cat /proc/uptime 2>/dev/null) || up=
    echo "rxe-vm-init: [${up%% *}] $*"
}

# Record a stage-1 failure for the host, then power off.
die() {
    log "ERROR: $*"
    [ -n "$ctl_at" ] && echo "$*" > "$ctl_at/stage1-error"
    poweroff_now
}

poweroff_now() {
    sync
    poweroff -f
    # poweroff -f should not return; if it does, make the kernel do it.
    echo o > /proc/sysrq-trigger
    sleep 10
}

mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys

log "loading modules"
while read -r mod; do
    [ -n "$mod" ] || continue
    insmod "/lib/modules/$mod" || log "insmod $mod failed"
done < /modules.list

# The control dir first, so that later errors can be reported to the host.
mkdir -p "$CTL"
mount -t 9p -o "rw,$P9OPTS,cache=none" rxectl "$CTL" || die "cannot mount the control share"
ctl_at=$CTL

# The host's root, read-only.  cache=loose: the guest may cache the host's
# binaries and libraries (they do not change during a test run).
mkdir -p "$NEWROOT"
mount -t 9p -o "ro,$P9OPTS,cache=loose" hostroot "$NEWROOT" || die "cannot mount the host root"
[ -x "$NEWROOT/bin/bash" ] || die "no /bin/bash in the host root"

# Fresh kernel filesystems and tmpfs scratch space inside the chroot.
mount -t proc proc "$NEWROOT/proc" || die "mount proc"
mount -t sysfs sysfs "$NEWROOT/sys" || die "mount sysfs"
mount -t devtmpfs devtmpfs "$NEWROOT/dev" || die "mount devtmpfs"
mkdir -p "$NEWROOT/dev/pts" "$NEWROOT/dev/shm"
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts "$NEWROOT/dev/pts" || die "mount devpts"
mount -t tmpfs -o mode=1777 tmpfs "$NEWROOT/dev/shm" || die "mount /dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$NEWROOT/tmp" || die "mount /tmp"
mount -t tmpfs -o mode=755 tmpfs "$NEWROOT/run" || die "mount /run"
mkdir -p "$NEWROOT/run/rxe-vm" "$NEWROOT/run/lock"
mount --move "$CTL" "$NEWROOT/run/rxe-vm" || die "cannot move the control share"
ctl_at=$NEWROOT/run/rxe-vm

# The writable share goes at its own host path, after the tmpfs mounts above
# (a share under /tmp would otherwise be hidden by the /tmp tmpfs).  The host
# writes the path to the control dir; the kernel command line is not used for
# it, so any path works.
share=
read -r share < "$NEWROOT/run/rxe-vm/share" || true
case "$share" in
    /?*) ;;
    *) die "bad share path '$share'" ;;
esac
mkdir -p "$NEWROOT$share" 2>/dev/null || true
[ -d "$NEWROOT$share" ] || die "share mount point $share does not exist in the guest"
# cache=mmap: no page cache (so nothing is lost or stale), but shared
# writable mmap works (some linkers and tools need it).
mount -t 9p -o "rw,$P9OPTS,cache=mmap" share "$NEWROOT$share" || die "cannot mount the share at $share"

log "starting stage 2"
# Stage 2 runs as a child (not exec) so that this PID 1 survives it and can
# power the guest off whatever happens in there.
chroot "$NEWROOT" /bin/bash /run/rxe-vm/rxe-vm --guest-stage2 /run/rxe-vm
rc=$?
log "stage 2 exited with status $rc"
# `rxe-vm --two` boots each guest with rxevm.role=a|b; its status is then in
# the role's subdirectory (and its errors go there too).
role=
for arg in $(cat /proc/cmdline); do
    case "$arg" in rxevm.role=?*) role=/${arg#rxevm.role=} ;; esac
done
[ -e "$NEWROOT/run/rxe-vm$role/status" ] || echo "stage 2 exited with status $rc without writing a status" > "$NEWROOT/run/rxe-vm$role/stage1-error"
sync
umount "$NEWROOT$share" 2>/dev/null
umount "$NEWROOT/run/rxe-vm" 2>/dev/null
poweroff_now
