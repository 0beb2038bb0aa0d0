#!/bin/sh
# Builds libfuse's example passthrough_hp (libfuse's own high-performance
# C passthrough server: low-level API, multi-threaded, kernel caching on)
# from Debian's fuse3 source package, for the benchmark harness's side by
# side peer. Nothing of it is kept in the repository; the binary goes to OUT.
#
#   scripts/passthrough-hp.sh OUT
#
# Needs root and apt-get (it installs libfuse3-dev, g++ and pkg-config and
# adds a deb-src list for the source download, removed again afterwards).
set -eu
out=${1:?usage: passthrough-hp.sh OUT}
[ -x "$out" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "passthrough-hp: needs root and apt-get" >&2
	exit 1
fi
. /etc/os-release
suite=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
list=/etc/apt/sources.list.d/acyclicfs-bench-src.sources
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; rm -f "$list"' EXIT
export DEBIAN_FRONTEND=noninteractive
cat >"$list" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt-get update -qq
apt-get install -y -qq libfuse3-dev g++ pkg-config >/dev/null
# The source matching the installed library (apt-get source takes the
# candidate version, which is what was just installed).
(cd "$tmp" && apt-get source --download-only -qq fuse3 >/dev/null 2>&1)
tar -C "$tmp" -xf "$(ls "$tmp"/fuse3_*.orig.tar.* | grep -v "\.asc$")"
src=$(ls -d "$tmp"/fuse-*/example/passthrough_hp.cc)
# meson's config.h is not generated: the features it would detect on this
# libc are set by hand (without HAVE_UTIMENSAT every utimes fails).
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2046 # pkg-config's flags are words
g++ -O2 -std=c++17 -DHAVE_UTIMENSAT -DHAVE_POSIX_FALLOCATE -DHAVE_SETXATTR \
	-o "$out.tmp" "$src" $(pkg-config --cflags --libs fuse3) -lpthread
mv "$out.tmp" "$out"
echo "passthrough-hp: built $out from $(basename "$(dirname "$(dirname "$src")")")"
