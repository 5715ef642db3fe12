# shellcheck shell=bash
# rxe-vm.d/cache.sh - the guest's boot files in the cache (ZCRPC_VM_CACHE,
# default ~/.cache/zcrpc-vm, one directory per kernel version): the Debian
# kernel package (fetched with `apt-get download`, never installed), its
# vmlinuz and, where the kernel has PVH, the uncompressed vmlinux, and the
# busybox initramfs with scripts/rxe-vm-init.sh as /init and GUEST_MODULES.
# prepare_cache is all the rest of rxe-vm needs from here (--prepare, and
# before every boot).

INIT_SCRIPT=$SCRIPT_DIR/rxe-vm-init.sh
CACHE_DIR=${ZCRPC_VM_CACHE:-$HOME/.cache/zcrpc-vm}
KERNEL_IMAGE=     # set by prepare_cache
INITRD_IMAGE=     # set by prepare_cache

# The kernel package that linux-image-amd64 currently depends on, e.g.
# linux-image-6.1.0-57-amd64 (empty if apt knows no such package).
resolve_kernel_pkg() {
    if [[ -n ${ZCRPC_VM_KERNEL_PKG:-} ]]; then
        echo "$ZCRPC_VM_KERNEL_PKG"
        return
    fi
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '!found && $1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; found = 1 }'
}

# Download PKG's .deb into DIR; run `apt-get update` once if that fails.
download_pkg() {
    local pkg=$1 dir=$2
    if (cd "$dir" && apt-get -q -o APT::Sandbox::User=root download "$pkg") >&2; then
        return 0
    fi
    msg "apt-get download $pkg failed; running apt-get update and retrying"
    apt-get -q update >&2 || true
    (cd "$dir" && apt-get -q -o APT::Sandbox::User=root download "$pkg") >&2
}

# Build the initramfs OUT for the kernel package DEB: busybox, the init
# script, and GUEST_MODULES with their dependencies (decompressed, in load
# order, listed in /modules.list).  Changes to this function or to the init
# script change the cache key (see prepare_cache), so edits rebuild.
build_initrd() {
    local deb=$1 out=$2 tmp
    tmp=$(mktemp -d "$CACHE_DIR/.initrd.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'; trap - RETURN" RETURN

    dpkg-deb -x "$deb" "$tmp/kernel"
    local mroot=$tmp/kernel kver
    # Modules live in lib/modules or, on usr-merged packages, usr/lib/modules.
    if [[ ! -d $mroot/lib/modules && -d $mroot/usr/lib/modules ]]; then
        ln -s usr/lib "$mroot/lib"
    fi
    kver=$(basename "$(find "$mroot/lib/modules/" -mindepth 1 -maxdepth 1 -type d | head -n 1)")
    [[ -n $kver ]] || die "no modules in $deb"
    # Debian packages ship no modules.dep (postinst makes it): make one.
    depmod -b "$mroot" "$kver"

    # The initramfs has no libraries: busybox must be the static build.
    ! ldd /bin/busybox > /dev/null 2>&1 ||
        die "/bin/busybox is dynamically linked; install busybox-static"
    local rd=$tmp/initrd
    mkdir -p "$rd"/{bin,dev,proc,sys,newroot,ctl,lib/modules}
    cp /bin/busybox "$rd/bin/busybox"
    local applet
    for applet in $("$rd/bin/busybox" --list); do
        [[ $applet == busybox ]] || ln -s busybox "$rd/bin/$applet"
    done
    install -m 755 "$INIT_SCRIPT" "$rd/init"

    # `modprobe --show-depends` prints "insmod PATH" for each module a module
    # needs, dependencies first; "builtin NAME" for built-in ones.
    local mod kind path name
    local -A seen=()
    : > "$rd/modules.list"
    for mod in "${GUEST_MODULES[@]}"; do
        modprobe -d "$mroot" -S "$kver" --show-depends "$mod" > "$tmp/deps" ||
            die "module $mod not found in $deb"
        while read -r kind path _; do
            [[ $kind == insmod ]] || continue
            name=${path##*/}
            name=${name%.xz}; name=${name%.zst}; name=${name%.gz}
            [[ -z ${seen[$name]:-} ]] || continue
            seen[$name]=1
            # busybox insmod may not read compressed modules: decompress.
            case $path in
                *.ko.xz)  xz -dc "$path" > "$rd/lib/modules/$name" ;;
                *.ko.zst) zstd -qdc "$path" > "$rd/lib/modules/$name" ;;
                *.ko.gz)  gzip -dc "$path" > "$rd/lib/modules/$name" ;;
                *)        cp "$path" "$rd/lib/modules/$name" ;;
            esac
            echo "$name" >> "$rd/modules.list"
        done < "$tmp/deps"
    done

    (cd "$rd" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$out.tmp"
    mv "$out.tmp" "$out"
}

# Decompress the bzImage IN into the plain ELF vmlinux OUT.  QEMU boots such
# a kernel through its PVH entry point (CONFIG_PVH), which skips the
# decompressor: that saves ~4 s per boot under TCG (xz is slow emulated).
extract_vmlinux() {
    local in=$1 out=$2 off
    off=$(LC_ALL=C grep -abo -m 1 $'\xfd7zXZ' "$in" | head -n 1 | cut -d: -f1)
    if [[ -n $off ]]; then
        tail -c "+$((off + 1))" "$in" | xz -dc --single-stream > "$out" 2>/dev/null || true
    else
        off=$(LC_ALL=C grep -abo -m 1 $'\x28\xb5\x2f\xfd' "$in" | head -n 1 | cut -d: -f1)
        [[ -n $off ]] || return 1
        tail -c "+$((off + 1))" "$in" | zstd -qdc > "$out" 2>/dev/null || true
    fi
    [[ $(head -c 4 "$out" 2>/dev/null) == $'\x7fELF' ]] || { rm -f "$out"; return 1; }
}

# Make sure the kernel image and the initramfs are in the cache; set
# KERNEL_IMAGE and INITRD_IMAGE.  A warm cache needs no download and no
# build.  Builders serialize on a flock; results appear by atomic rename.
prepare_cache() {
    [[ -r $INIT_SCRIPT ]] || die "missing $INIT_SCRIPT"
    mkdir -p "$CACHE_DIR"

    local pkg key kdir
    pkg=$(resolve_kernel_pkg)
    if [[ -z $pkg ]]; then
        # No apt lists?  Use the newest cached kernel if there is one.
        kdir=$(find "$CACHE_DIR" -mindepth 2 -maxdepth 2 -name vmlinuz -printf '%h\n' 2>/dev/null | sort -V | tail -n 1)
        if [[ -n $kdir ]]; then
            pkg=linux-image-${kdir##*/}
        else
            msg "apt-cache knows no linux-image-amd64; running apt-get update"
            apt-get -q update >&2 || true
            pkg=$(resolve_kernel_pkg)
            [[ -n $pkg ]] || die "cannot resolve linux-image-amd64 to a kernel package"
        fi
    fi
    key=${pkg#linux-image-}
    kdir=$CACHE_DIR/$key

    # Initramfs cache key: init script + this builder + the module list.
    local hash
    hash=$({ cat "$INIT_SCRIPT"; declare -f build_initrd; echo "${GUEST_MODULES[*]}"; } |
           sha256sum | cut -c1-16)
    INITRD_IMAGE=$kdir/initrd-$hash.img
    if [[ ! -f $kdir/vmlinuz || ! -f $INITRD_IMAGE || ! -f $kdir/kernel.deb ]]; then
        prepare_cache_locked "$pkg" "$kdir"
    fi
    # Prefer the uncompressed PVH kernel (see extract_vmlinux).
    KERNEL_IMAGE=$kdir/vmlinuz
    [[ ! -f $kdir/vmlinux ]] || KERNEL_IMAGE=$kdir/vmlinux
}

# The slow part of prepare_cache, under the cache lock: download and build
# what is missing.
prepare_cache_locked() {
    local pkg=$1 kdir=$2

    local lock
    exec {lock}>"$CACHE_DIR/.lock"
    if ! flock -n "$lock"; then
        msg "waiting for the cache lock ($CACHE_DIR/.lock)"
        flock "$lock"
    fi
    mkdir -p "$kdir"
    if [[ ! -f $kdir/kernel.deb || ! -f $kdir/vmlinuz ]]; then
        msg "downloading $pkg into $kdir"
        local dl
        dl=$(mktemp -d "$CACHE_DIR/.download.XXXXXX")
        if ! download_pkg "$pkg" "$dl"; then
            rm -rf "$dl"
            die "apt-get download $pkg failed"
        fi
        local deb
        deb=$(find "$dl" -maxdepth 1 -name '*.deb' | head -n 1)
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dl" --wildcards './boot/vmlinuz-*' './boot/config-*'
        if grep -qs '^CONFIG_PVH=y' "$dl"/boot/config-* &&
            extract_vmlinux "$dl"/boot/vmlinuz-* "$dl/vmlinux"; then
            mv "$dl/vmlinux" "$kdir/vmlinux"
        fi
        mv "$dl"/boot/vmlinuz-* "$kdir/vmlinuz.tmp"
        mv "$deb" "$kdir/kernel.deb"
        mv "$kdir/vmlinuz.tmp" "$kdir/vmlinuz"
        rm -rf "$dl"
    fi
    if [[ ! -f $INITRD_IMAGE ]]; then
        msg "building initramfs $INITRD_IMAGE"
        build_initrd "$kdir/kernel.deb" "$INITRD_IMAGE"
    fi
    exec {lock}>&-
}
