#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds consumer projects
# as a user would and runs them:
#   - main.c, the raw API only, with find_package(zcrpc) and with
#     pkg-config zcrpc, where pkg-config finds no libprotobuf-c: it builds,
#     links and runs without protobuf-c (no protobuf-c header compiled, no
#     libprotobuf-c needed by it or by libzcrpc);
#   - main_pb.c, the protobuf-c glue, with find_package(zcrpc COMPONENTS pb)
#     (zcrpc::pb) and with pkg-config zcrpc-pb: it links libzcrpc_pb;
#   - find_package(zcrpc COMPONENTS pb) without libprotobuf-c fails, saying so.
# Also checks that each shared library exports only its public API.
# Usage: check.sh BUILD_DIR CONSUMER_SRC WORK_DIR [SANITIZE_FLAGS]
set -euo pipefail
build=$1 src=$2 work=$3 san=${4:-}
rm -rf "$work"; mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
lib=$(find "$work/prefix" -name 'libzcrpc.so.0' | head -1)
libdir=$(dirname "$lib")
pblib=$libdir/libzcrpc_pb.so.0
pc=$libdir/pkgconfig
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
fail() { echo "FAIL: $*"; exit 1; }

# A pkg-config search path holding every .pc of the system but
# libprotobuf-c's: a machine without protobuf-c, as pkg-config sees it.
nopbc=$work/pc-without-protobuf-c
mkdir -p "$nopbc"
IFS=: read -ra dirs <<<"$(pkg-config --variable pc_path pkg-config)"
for d in "${dirs[@]}"; do
	for f in "$d"/*.pc; do
		n=${f##*/}
		[ -e "$f" ] && [ "$n" != libprotobuf-c.pc ] && [ ! -e "$nopbc/$n" ] &&
			ln -s "$f" "$nopbc/$n"
	done
done
! PKG_CONFIG_LIBDIR=$nopbc pkg-config --exists libprotobuf-c ||
	fail "libprotobuf-c.pc is still found in $nopbc"

# --- the raw API, without protobuf-c -----------------------------------------
PKG_CONFIG_LIBDIR=$nopbc cmake -S "$src" -B "$work/build" \
	-DCMAKE_PREFIX_PATH="$work/prefix" \
	-DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
cmake --build "$work/build" >/dev/null
LD_LIBRARY_PATH=$libdir "$work/build/consumer"
# shellcheck disable=SC2046
cc $san -std=c11 -Wall -Werror "$src/main.c" -o "$work/consumer-pc" \
   $(PKG_CONFIG_LIBDIR=$nopbc:$pc pkg-config --cflags --libs zcrpc)
LD_LIBRARY_PATH=$libdir "$work/consumer-pc"
# shellcheck disable=SC2046
if cc -std=c11 -M "$src/main.c" $(PKG_CONFIG_LIBDIR=$nopbc:$pc pkg-config --cflags zcrpc) |
	grep -q protobuf-c; then
	fail "zcrpc/zcrpc.h includes a protobuf-c header"
fi
for f in "$lib" "$work/build/consumer" "$work/consumer-pc"; do
	! needed "$f" | grep -q 'protobuf-c\|zcrpc_pb' ||
		fail "$f needs $(needed "$f" | grep 'protobuf-c\|zcrpc_pb')"
done
! LD_LIBRARY_PATH=$libdir ldd "$work/consumer-pc" | grep -q protobuf-c ||
	fail "the raw consumer loads libprotobuf-c"

# --- the protobuf-c glue ------------------------------------------------------
cmake -S "$src" -B "$work/build-pb" -DZCRPC_CONSUMER_PB=ON \
	-DCMAKE_PREFIX_PATH="$work/prefix" \
	-DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
cmake --build "$work/build-pb" >/dev/null
LD_LIBRARY_PATH=$libdir "$work/build-pb/consumer_pb"
# shellcheck disable=SC2046
cc $san -std=c11 -Wall -Werror "$src/main_pb.c" -o "$work/consumer-pb-pc" \
   $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs zcrpc-pb)
LD_LIBRARY_PATH=$libdir "$work/consumer-pb-pc"
for f in "$work/build-pb/consumer_pb" "$work/consumer-pb-pc"; do
	needed "$f" | grep -qx libzcrpc_pb.so.0 || fail "$f does not link libzcrpc_pb"
done
needed "$pblib" | grep -qx libzcrpc.so.0 || fail "libzcrpc_pb does not link libzcrpc"
needed "$pblib" | grep -q '^libprotobuf-c' || fail "libzcrpc_pb does not link libprotobuf-c"

# --- COMPONENTS pb without protobuf-c: a configure error that says why ------
if PKG_CONFIG_LIBDIR=$nopbc cmake -S "$src" -B "$work/build-nopb" -DZCRPC_CONSUMER_PB=ON \
	-DCMAKE_PREFIX_PATH="$work/prefix" >"$work/nopb.log" 2>&1; then
	fail "find_package(zcrpc COMPONENTS pb) succeeded without libprotobuf-c"
fi
grep -q "needs libprotobuf-c" "$work/nopb.log" ||
	{ cat "$work/nopb.log"; fail "the configure error does not name libprotobuf-c"; }

# --- exports: zcrpc_* (never zcrpc__* internals) and zcrpc_pb_* only ----------
exports() { nm -D --defined-only "$1" | awk '$2 != "A" {print $3}' | sed 's/@.*//'; }
syms=$(exports "$lib")
bad=$(echo "$syms" | grep -v '^zcrpc_[a-z]' || true)
[ -z "$bad" ] || fail "unexpected exported symbols of libzcrpc: $bad"
bad=$(echo "$syms" | grep '^zcrpc_pb_' || true)
[ -z "$bad" ] || fail "libzcrpc exports the protobuf-c glue: $bad"
echo "$syms" | grep -qx zcrpc_version
syms=$(exports "$pblib")
bad=$(echo "$syms" | grep -v '^zcrpc_pb_[a-z]' || true)
[ -z "$bad" ] || fail "unexpected exported symbols of libzcrpc_pb: $bad"
echo "$syms" | grep -qx zcrpc_pb_client_create
echo "install consumer OK"
