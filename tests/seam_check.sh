#!/usr/bin/env bash
# unit.seam_check: the RPC layer uses only the public transport API and the
# seam (src/transport/seam.h), never the transport's internals
# (docs/design.md "The seam"). Checks the sources (no src/rpc file includes
# src/transport/internal.h; from src/transport only seam.h, and test_hooks.h
# in the test hooks) and the built objects: every symbol a src/rpc object
# leaves undefined is
#   - public: zcrpc_* declared in include/zcrpc/,
#   - the RPC layer's own or the core's: zcrpc__* defined by an object of
#     src/rpc or src/core,
#   - the seam's: zcrpc__* declared in src/transport/seam.h,
#   - or the C library's (libc, pthread), linker or sanitizer runtime names;
#     protobuf-c only in the protobuf-c glue (pb_*, which moves to src/pb),
#     c-ares only in the dns: resolver, libcurl only in the etcd: resolver
#     and announce.
# Usage: seam_check.sh SOURCE_DIR OBJECTS
#   OBJECTS: the library's objects, ;-separated (ctest passes
#   $<TARGET_OBJECTS:zcrpc_objects>), or a build directory to search.
set -euo pipefail
src=$1
objs=$2
fail=0

# ---- sources ---------------------------------------------------------------
if grep -rn --include='*.[ch]' '#include.*transport/internal\.h' "$src/src/rpc"; then
	echo "FAIL: src/rpc includes src/transport/internal.h (use seam.h)" >&2
	fail=1
fi
while IFS= read -r line; do
	case $line in
	*'"../transport/seam.h"'*) ;;
	*_test_hooks.c:*'"../transport/test_hooks.h"'*) ;;
	*)
		echo "FAIL: $line (from src/transport, src/rpc includes seam.h only)" >&2
		fail=1
		;;
	esac
done < <(grep -rn --include='*.[ch]' '#include.*transport/' "$src/src/rpc" || true)

# ---- objects ---------------------------------------------------------------
if [ -d "$objs" ]; then
	mapfile -t all < <(find "$objs" -path '*/zcrpc_objects.dir/src/*.o' | sort)
else
	IFS=';' read -r -a all <<<"$objs"
fi
rpc_objs=()
core_objs=()
for o in "${all[@]}"; do
	case $o in
	*/src/rpc/*.o) rpc_objs+=("$o") ;;
	*/src/core/*.o) core_objs+=("$o") ;;
	esac
done
if [ "${#rpc_objs[@]}" -eq 0 ]; then
	echo "FAIL: no src/rpc objects in $objs (build the library first)" >&2
	exit 1
fi
libc=$(ldd /bin/sh | awk '/libc\.so/ { print $3; exit }')
if [ -z "$libc" ] || [ ! -r "$libc" ]; then
	echo "FAIL: cannot find the C library to check against" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$libc" | awk '{ sub(/@.*/, "", $3); print $3 }' | sort -u >"$tmp/libc"
nm --defined-only "${rpc_objs[@]}" "${core_objs[@]}" 2>/dev/null |
	awk 'NF == 3 && $2 ~ /[A-Z]/ { print $3 }' | sort -u >"$tmp/own"
grep -ohE '\bzcrpc__[a-z0-9_]+\b' "$src/src/transport/seam.h" | sort -u >"$tmp/seam"
cat "$src"/include/zcrpc/*.h >"$tmp/public.h"

for o in "${rpc_objs[@]}"; do
	name=$(basename "$o")
	for sym in $(nm -u "$o" | awk '{ print $2 }'); do
		case $sym in
		zcrpc__*)
			grep -qxF "$sym" "$tmp/own" && continue
			grep -qxF "$sym" "$tmp/seam" && continue
			why="an internal symbol neither the RPC layer's, the core's nor the seam's"
			;;
		zcrpc_*)
			grep -qw "$sym" "$tmp/public.h" && continue
			why="not declared in include/zcrpc/"
			;;
		protobuf_c_*)
			case $name in pb_*) continue ;; esac
			why="protobuf-c outside the protobuf-c glue"
			;;
		ares_*)
			case $name in resolve_dns*) continue ;; esac
			why="c-ares outside the dns: resolver"
			;;
		curl_*)
			case $name in resolve_etcd* | announce* | etcd_http*) continue ;; esac
			why="libcurl outside the etcd: resolver and announce"
			;;
		_GLOBAL_OFFSET_TABLE_ | __asan_* | __ubsan_* | __sanitizer_* | __lsan_* | __gcov_*)
			continue
			;;
		*)
			grep -qxF "$sym" "$tmp/libc" && continue
			why="not the C library's"
			;;
		esac
		echo "FAIL: $name uses $sym: $why" >&2
		fail=1
	done
done
if [ "$fail" -eq 0 ]; then
	echo "seam check: ${#rpc_objs[@]} src/rpc objects use only the public API, the seam, core and libc"
fi
exit "$fail"
