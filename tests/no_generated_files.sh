#!/usr/bin/env bash
# unit.no_generated_files_committed: protoc-c's and zcrpc-gen's output
# (*.pb-c.*, *.zcrpc.*) is made in the build tree and never committed.
# Usage: no_generated_files.sh SOURCE_DIR
set -euo pipefail
src=$1
if ! command -v git >/dev/null 2>&1; then
	echo "git is not installed: cannot check $src (passing)"
	exit 0
fi
if ! git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	if [ -e "$src/.git" ]; then
		# A checkout git cannot read (e.g. "dubious ownership"): say so.
		echo "$src is a git checkout but git cannot list it:" >&2
		git -C "$src" rev-parse --is-inside-work-tree >&2 || true
		exit 1
	fi
	echo "$src is not a git checkout: nothing to check (passing)"
	exit 0
fi
files=$(git -C "$src" ls-files -- '*.pb-c.*' '*.zcrpc.*')
if [ -n "$files" ]; then
	echo "generated files are committed (they belong in the build tree):"
	echo "$files"
	exit 1
fi
echo "no generated files committed"
