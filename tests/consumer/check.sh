#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds a consumer project
# with find_package(zcrpc) and another with pkg-config, and runs both.
# Also checks that the shared library exports only the public API.
# Usage: check.sh BUILD_DIR CONSUMER_SRC WORK_DIR [SANITIZE_FLAGS]
set -euo pipefail
build=$1 src=$2 work=$3 san=${4:-}
rm -rf "$work"; mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
cmake --build "$work/build" >/dev/null
lib=$(find "$work/prefix" -name 'libzcrpc.so.0' | head -1)
LD_LIBRARY_PATH=$(dirname "$lib") "$work/build/consumer"
pc=$(dirname "$lib")/pkgconfig
# shellcheck disable=SC2046
cc $san -std=c11 -Wall -Werror "$src/main.c" -o "$work/consumer-pc" \
   $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs zcrpc)
LD_LIBRARY_PATH=$(dirname "$lib") "$work/consumer-pc"
# Only zcrpc_* (never zcrpc__* internals) is exported, besides the version
# nodes of cmake/zcrpc.map (ZCRPC_0.1, ...).
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//')
bad=$(echo "$syms" | grep -v '^zcrpc_[a-z]' | grep -Ev '^ZCRPC_[0-9.]+$' || true)
[ -z "$bad" ] || { echo "unexpected exported symbols: $bad"; exit 1; }
echo "$syms" | grep -qx zcrpc_version
echo "install consumer OK"
