# shellcheck shell=bash
# rxe-vm.d/siw.sh - the Soft-iWARP guest (--siw): the siw kernel module in
# the cache (built out of tree from Debian's own sources for the guest's
# exact kernel), loading it in the guest, siw0/siw1 on the veth pair, and
# the network counters that stand in for rxe's hw_counters (siw has none).
# Used by the host (prepare_siw_cache, fill_ctl) and by guest stage 2
# (setup_siw, snapshot_net_counters).
#
# Debian's kernel packages ship no siw.ko (CONFIG_RDMA_SIW is off), but the
# driver is self-contained: drivers/infiniband/sw/siw of linux-source-6.1
# builds against linux-headers-<kver> in ~10 s.  The headers and the source
# are fetched with `apt-get download` and unpacked privately (dpkg-deb -x),
# like the kernel package, not installed with apt:
# - the versions must equal the guest kernel package's version exactly
#   (vermagic and modversions), and the guest kernel is whatever the cache
#   holds; installed packages follow the host's apt state instead
#   (linux-headers-amd64 moves on with every security update, and a second
#   kernel ABI needs a second set of headers installed side by side);
# - nothing is installed as root on the CI machine (no postinst hooks, no
#   dkms, no 1 GiB /usr/src tree); only package-registry network is needed;
# - the downloads (~155 MB, mostly the source tarball) are deleted after the
#   build: the cache keeps only the three modules (~1 MB), so a warm cache
#   needs no download and no build.
# The host needs make and gcc-12 (build-essential on bookworm; the kernel was
# built with gcc-12) and xz-utils, all in scripts/install-deps.

# The modules a --siw guest loads, in order, from the siw cache dir: the
# CRC32C that siw's MPA CRC uses (libcrc32c asks the crypto API for
# "crc32c"), then siw itself (ib_core is in the initramfs already).
readonly SIW_MODULES=(crc32c_generic libcrc32c siw)
SIW_DIR=          # the cached modules of this kernel (set by prepare_siw_cache)

# siw_pkg_version KERNEL_DEB: the Debian version of the guest's kernel
# package (e.g. 6.1.192-3), which the headers and source must match.
siw_pkg_version() {
    dpkg-deb -f "$1" Version
}

# siw_decompress_module SRC DST: a module from the kernel package,
# decompressed (the host's insmod may lack xz/zstd support).
siw_decompress_module() {
    case $1 in
        *.ko.xz)  xz -dc "$1" > "$2" ;;
        *.ko.zst) zstd -qdc "$1" > "$2" ;;
        *.ko.gz)  gzip -dc "$1" > "$2" ;;
        *)        cp "$1" "$2" ;;
    esac
}

# build_siw KERNEL_DEB OUT: build siw.ko for the kernel in KERNEL_DEB and put
# it, with crc32c_generic.ko and libcrc32c.ko from KERNEL_DEB, into the new
# directory OUT (plus modules.list, the load order).  Changes to this
# function change the cache key (see prepare_siw_cache).
build_siw() {
    local deb=$1 out=$2 tmp kver ver series
    tmp=$(mktemp -d "$CACHE_DIR/.siw.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'; trap - RETURN" RETURN

    ver=$(siw_pkg_version "$deb")
    [[ -n $ver ]] || { msg "cannot read the version of $deb"; return 1; }
    dpkg-deb -x "$deb" "$tmp/kernel" || return 1
    local mroot=$tmp/kernel
    [[ -d $mroot/lib/modules || ! -d $mroot/usr/lib/modules ]] || ln -s usr/lib "$mroot/lib"
    kver=$(basename "$(find "$mroot/lib/modules/" -mindepth 1 -maxdepth 1 -type d | head -n 1)")
    [[ -n $kver ]] || { msg "no modules in $deb"; return 1; }
    series=${kver%%.0-*}                          # 6.1.0-57-amd64 -> 6.1
    mkdir -p "$tmp/out"

    # The two CRC32C modules, straight from the kernel package.
    local m path
    for m in crc32c_generic libcrc32c; do
        path=$(find "$mroot/lib/modules/$kver" -name "$m.ko*" | head -n 1)
        [[ -n $path ]] || { msg "no $m in $deb"; return 1; }
        siw_decompress_module "$path" "$tmp/out/$m.ko" || return 1
    done

    # Headers: linux-headers-<kver> depends on linux-headers-<abi>-common
    # and linux-kbuild-<series> of the same version; the source package is
    # linux-source-<series>.  All four at exactly the kernel's version.
    local dl=$tmp/dl hdr=linux-headers-$kver dep pkgs=()
    mkdir -p "$dl"
    msg "siw: downloading $hdr and linux-source-$series ($ver)"
    download_pkg "$hdr=$ver" "$dl" || { msg "apt-get download $hdr=$ver failed"; return 1; }
    for dep in $(dpkg-deb -f "$dl"/"$hdr"_*.deb Depends | tr ',' '\n' | awk '{ print $1 }'); do
        [[ $dep == linux-headers-* || $dep == linux-kbuild-* ]] && pkgs+=("$dep=$ver")
    done
    pkgs+=("linux-source-$series=$ver")
    for dep in "${pkgs[@]}"; do
        download_pkg "$dep" "$dl" || { msg "apt-get download $dep failed"; return 1; }
    done
    local f
    for f in "$dl"/linux-headers-*.deb "$dl"/linux-kbuild-*.deb; do
        dpkg-deb -x "$f" "$tmp/root" || return 1
    done
    local kdir=$tmp/root/usr/src/linux-headers-$kver
    [[ -f $kdir/Makefile ]] || { msg "no $kdir/Makefile in $hdr"; return 1; }
    # The flavour's Makefile includes the common tree by absolute path
    # (/usr/src/linux-headers-<abi>-common/Makefile): point it at ours.
    # (The scripts/ and tools/ links into linux-kbuild are relative.)
    sed -i "s|^include /usr/src/|include $tmp/root/usr/src/|" "$kdir/Makefile" || return 1

    # Only the siw directory of the source tarball.
    local src=linux-source-$series/drivers/infiniband/sw/siw
    dpkg-deb --fsys-tarfile "$dl"/linux-source-*.deb |
        tar -xO "./usr/src/linux-source-$series.tar.xz" |
        tar -xJ -C "$tmp" "$src" || { msg "cannot extract $src"; return 1; }
    rm -rf "$dl"

    msg "siw: building siw.ko for $kver"
    if ! make -s -C "$kdir" M="$tmp/$src" CONFIG_RDMA_SIW=m -j2 modules > "$tmp/make.log" 2>&1; then
        tail -n 20 "$tmp/make.log" >&2
        msg "building siw.ko failed"
        return 1
    fi
    [[ $(modinfo -F vermagic "$tmp/$src/siw.ko") == "$kver "* ]] ||
        { msg "siw.ko has the wrong vermagic"; return 1; }
    # Without its debug info (5 MB -> ~0.3 MB), like the kernel package's.
    strip --strip-debug -o "$tmp/out/siw.ko" "$tmp/$src/siw.ko" || return 1
    printf '%s %s\n' "$kver" "$ver" > "$tmp/out/version"
    printf '%s.ko\n' "${SIW_MODULES[@]}" > "$tmp/out/modules.list"
    mv "$tmp/out" "$out"
}

# prepare_siw_cache: make sure the siw modules of the guest kernel are in
# the cache (after prepare_cache); set SIW_DIR.  Cached as
# <kernel dir>/siw-<hash of this recipe>/; built under the cache lock.
prepare_siw_cache() {
    local kdir=${KERNEL_IMAGE%/*} hash
    hash=$({ declare -f build_siw siw_decompress_module; echo "${SIW_MODULES[*]}"; } |
           sha256sum | cut -c1-16)
    SIW_DIR=$kdir/siw-$hash
    [[ ! -f $SIW_DIR/modules.list ]] || return 0

    local lock start=$SECONDS
    exec {lock}>"$CACHE_DIR/.lock"
    if ! flock -n "$lock"; then
        msg "waiting for the cache lock ($CACHE_DIR/.lock)"
        flock "$lock"
    fi
    if [[ ! -f $SIW_DIR/modules.list ]]; then
        [[ -f $kdir/kernel.deb ]] || die "no kernel package in $kdir"
        build_siw "$kdir/kernel.deb" "$SIW_DIR" || die "cannot build the siw module (see above)"
        msg "siw: modules cached in $SIW_DIR ($((SECONDS - start))s)"
    fi
    exec {lock}>&-
}

# In the guest: load the siw modules that fill_ctl copied into the control
# dir, in order (an out-of-tree module taints the kernel: harmless here).
load_siw_modules() {
    local dir=$1 m
    [[ -f $dir/modules.list ]] || { echo "no siw modules in $dir" >&2; return 1; }
    while read -r m; do
        [[ -d /sys/module/${m%.ko} ]] && continue
        try insmod "$dir/$m" || return 1
    done < "$dir/modules.list"
}

# True when siw device DEV's port 1 is ACTIVE with its GID, and its netdev
# NETDEV is up with address ADDR.  An iWARP GID is not an address but the
# netdev's MAC (bytes 0-5 of GID 0, the rest zero), set when the link is
# added; rdma_cm resolves iWARP addresses through IP routing, so the
# address on the netdev is what must be usable.
siw_ready() {
    local dev=$1 netdev=$2 addr=$3 port=/sys/class/infiniband/$1/ports/1 state gid mac
    read -r state < "$port/state" 2>/dev/null || return 1
    [[ $state == *ACTIVE* ]] || return 1
    read -r gid < "$port/gids/0" 2>/dev/null || return 1
    read -r mac < "/sys/class/net/$netdev/address" || return 1
    mac=${mac//:/}
    [[ ${gid//:/} == "$mac"* ]] || return 1
    ip -o addr show dev "$netdev" | grep -q " $addr/" || return 1
}

# wait_siw_ready: wait (bounded) until siw0 and siw1 are ready (siw_ready);
# on timeout show the links and addresses on stderr, and fail.
wait_siw_ready() {
    local deadline=$((SECONDS + RXE_WAIT_SECONDS))
    until siw_ready "$DEV0" "$NETDEV0" "$ADDR0" && siw_ready "$DEV1" "$NETDEV1" "$ADDR1"; do
        if ((SECONDS >= deadline)); then
            echo "siw devices not ready after ${RXE_WAIT_SECONDS}s:" >&2
            rdma link show >&2 || true
            ip -br addr >&2 || true
            return 1
        fi
        sleep 0.1
    done
}

# setup_siw MODDIR: load the siw modules from MODDIR, then the same network
# as setup_rxe cross (veth0/veth1, addresses, routed across the pair) with
# siw0 on veth0 and siw1 on veth1, and wait until both are usable.
setup_siw() {
    load_siw_modules "$1" || return 1
    setup_veth_pair || return 1
    try rdma link add "$DEV0" type siw netdev "$NETDEV0" || return 1
    try rdma link add "$DEV1" type siw netdev "$NETDEV1" || return 1
    route_across_veth || return 1
    wait_siw_ready || return 1
    check_char_devs /dev/infiniband/uverbs0 /dev/infiniband/uverbs1 /dev/infiniband/rdma_cm
}

# The --siw counters: "<dev> <counter> <value>" for the veths' packet and
# byte counters and the guest's TCP segment counters ("tcp OutSegs ...",
# from /proc/net/snmp).  siw carries RDMA over kernel TCP, so these rise
# when traffic crossed siw (the veths only when it crossed the pair; TCP
# between two local addresses otherwise takes loopback).
snapshot_net_counters() {
    local netdev c v
    for netdev in "$NETDEV0" "$NETDEV1"; do
        for c in tx_packets rx_packets tx_bytes rx_bytes; do
            read -r v < "/sys/class/net/$netdev/statistics/$c" 2>/dev/null || v='?'
            printf '%s %s %s\n' "$netdev" "$c" "$v"
        done
    done
    awk '$1 == "Tcp:" && !hdr { for (i = 2; i <= NF; i++) name[i] = $i; hdr = 1; next }
         $1 == "Tcp:" && hdr {
             for (i = 2; i <= NF; i++)
                 if (name[i] ~ /^(ActiveOpens|PassiveOpens|InSegs|OutSegs|RetransSegs)$/)
                     print "tcp", name[i], $i
         }' /proc/net/snmp
}
