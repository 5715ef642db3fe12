#!/usr/bin/env bash
# One generator case of tests/proto/gen through CMake, as a user's project
# on an installed zcrpc (zcrpc_add_proto / zcrpc_protoc_c from the package).
#
#   check.sh CASE BUILD_DIR SRC WORK_DIR [SANITIZE_FLAGS]
#
# Installs BUILD_DIR into WORK_DIR/prefix, configures SRC with -DCASE=CASE
# into WORK_DIR/build and builds it; then runs the program (which checks
# the generated names), or, for import_missing, expects configure to fail
# with a message that names the import. Prints what it saw.
set -euo pipefail
case=$1 build=$2 src=$3 work=$4 san=${5:-}
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
configure() {
	cmake -S "$src" -B "$work/build" -DCASE="$case" -DCMAKE_PREFIX_PATH="$work/prefix" \
	      -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >"$work/configure.log" 2>&1
}
if [ "$case" = import_missing ]; then
	if configure; then
		echo "configure succeeded, expected an error naming nowhere/x.proto"
		exit 1
	fi
	cat "$work/configure.log"
	grep -q "missing.proto imports nowhere/x.proto, which is in none of" "$work/configure.log"
	echo "import_missing: configure failed as expected"
	exit 0
fi
configure || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
case $case in
import_generated)
	for f in b c google/protobuf/empty; do
		test -e "$work/build/zcrpc-gen/$f.pb-c.c" || { echo "$f.pb-c.c was not generated"; exit 1; }
	done
	;;
import_depends)
	# Generated once, by the dependency; not again for the program.
	test -e "$work/build/pb-c/common/s.pb-c.c"
	if [ -e "$work/build/zcrpc-gen/common/s.pb-c.c" ]; then
		echo "common/s.pb-c.c generated twice (the dependency provides it)"
		exit 1
	fi
	;;
streaming)
	# A service of streaming methods only has no service registration.
	if grep -q 'kk__only_streams__zcrpc_register' "$work/build/zcrpc-gen/stream_kinds.zcrpc.h"; then
		echo "kk__only_streams__zcrpc_register written for a service without unary methods"
		exit 1
	fi
	;;
esac
lib=$(dirname "$(find "$work/prefix" -name 'libzcrpc.so.0' | head -1)")
LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$work/build/t"
