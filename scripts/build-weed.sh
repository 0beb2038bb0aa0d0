#!/usr/bin/env bash
# Builds SeaweedFS's `weed` binary once per machine, for the tests that need
# a real S3 server (internal/weedtest). The binary lands in a cache outside
# the repository and is reused when present:
#
#   ${ACYCLICFS_WEED_CACHE:-/var/cache/acyclicfs}/weed-VERSION/weed
#
# SeaweedFS's go.mod has replace directives, so `go install module@version`
# is refused; instead the module's source comes from the Go module proxy
# (go mod download) and is built in a copy of its directory. About 5 minutes
# on 2 cores, once. Prints the binary's path.
set -euo pipefail

VERSION="${WEED_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}"
CACHE="${ACYCLICFS_WEED_CACHE:-/var/cache/acyclicfs}"
DEST="$CACHE/weed-$VERSION"
BIN="$DEST/weed"

if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi

GO="${GO:-go}"
mkdir -p "$DEST"
work="$(mktemp -d "$DEST/build.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

dir="$(cd "$work" && GOFLAGS=-mod=mod "$GO" mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  echo "build-weed: go mod download gave no module directory for seaweedfs@$VERSION" >&2; exit 1
fi
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
echo "build-weed: building weed $VERSION (several minutes, once per machine)" >&2
(cd "$work/src" && GOFLAGS= CGO_ENABLED=0 "$GO" build -o "$work/weed" ./weed)
mv "$work/weed" "$BIN"
echo "$BIN"
