#!/bin/sh
# with-uring.sh CMD [ARG...]: run CMD with the fuse module's enable_uring on
# (where root may turn it on), then put the parameter back as it was: it is
# the whole machine's setting, and other users' mounts must not find it
# changed after the tests.
param=/sys/module/fuse/parameters/enable_uring
old=""
if [ -w "$param" ]; then
	old=$(cat "$param")
	case "$old" in
	Y | 1) old="" ;; # already on: nothing to restore
	*) echo 1 >"$param" 2>/dev/null || old="" ;;
	esac
fi
restore() { if [ -n "$old" ]; then echo 0 >"$param" 2>/dev/null || true; fi; }
trap restore EXIT
trap 'exit 130' INT TERM
"$@"
