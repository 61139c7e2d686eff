#!/usr/bin/env bash
# scripts/apidiff.sh [BASE]: checks that the exported API of pkg/... has no
# incompatible change since BASE (default: the latest release tag v*). Every
# public package of BASE must still exist, and golang.org/x/exp's apidiff must
# report no incompatible change in it. Before the first tag there is nothing
# to compare with; it says so. Exit 1 lists what broke.
set -euo pipefail
cd "$(dirname "$0")/.."
APIDIFF_VERSION=v0.0.0-20261113113407-e3970619a1a4
base="${1:-$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null || true)}"
if [ -z "$base" ]; then
	echo "apidiff: no release tag (v*) yet: the public API is compared with the latest tag from the first one on"
	exit 0
fi
work="$(mktemp -d)"
cleanup() { git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
GOBIN="$work/bin" GOFLAGS= go install "golang.org/x/exp/cmd/apidiff@$APIDIFF_VERSION"
git worktree add -q --detach "$work/base" "$base"
broken=0
for pkg in $(cd "$work/base" && go list ./pkg/... 2>/dev/null); do
	if ! go list "$pkg" >/dev/null 2>&1; then
		echo "apidiff: $pkg existed in $base and is gone"
		broken=1
		continue
	fi
	export_file="$work/$(echo "$pkg" | tr / _).export"
	(cd "$work/base" && "$work/bin/apidiff" -w "$export_file" "$pkg")
	out="$("$work/bin/apidiff" -incompatible "$export_file" "$pkg")"
	if [ -n "$out" ]; then
		echo "apidiff: $pkg: incompatible with $base:"
		echo "$out" | sed 's/^/  /'
		broken=1
	fi
done
if [ "$broken" = 0 ]; then
	echo "apidiff: pkg/... has no incompatible change since $base"
fi
exit "$broken"
