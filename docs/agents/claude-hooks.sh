#!/bin/sh
# acyclicfs leases for Claude Code's tool calls (docs/agents.md "Claude Code
# started without run"). Install as .claude/hooks/acyclicfs.sh and register
# it in .claude/settings.json for PreToolUse (pre), PostToolUse and
# PostToolUseFailure (post) and Stop (stop). Claude Code gives each hook the
# event as JSON on stdin; the tool call's id keys its lease.
#   ACYCLICFS_MOUNT  the mountpoint (default: under 'acyclicfs run' its
#                    private mountpoint $ACYCLICFS_RUN_MOUNT, else $CLAUDE_PROJECT_DIR)
#   ACYCLICFS        the acyclicfs binary (default: acyclicfs on PATH)
mp=${ACYCLICFS_MOUNT:-${ACYCLICFS_RUN_MOUNT:-$CLAUDE_PROJECT_DIR}}
afs=${ACYCLICFS:-acyclicfs}
input=$(cat)
field() { printf '%s' "$input" | sed -n 's/.*"'"$1"'" *: *"\([^"]*\)".*/\1/p'; }
# Lease ids live outside the mount (writing them inside would be a change),
# one directory per Claude Code session: Stop ends only its own session's.
sid=$(field session_id | tr -cd 'A-Za-z0-9_-')
dir=${XDG_RUNTIME_DIR:-/tmp}/acyclicfs-claude-$(id -u)/${sid:-none}
id=$(field tool_use_id | tr -cd 'A-Za-z0-9_-')
case $1 in
pre)
	[ -n "$id" ] || exit 0
	mkdir -p -m 700 "${dir%/*}" "$dir" || exit 1
	# A tool call is one lease: no landing moves the view under it.
	# Failing to open one does not block the call (exit 1, not 2).
	"$afs" lease begin "$mp" --owner "claude:$id" --ttl 1h >"$dir/$id" || { rm -f "$dir/$id"; exit 1; }
	;;
post)
	f=$dir/$id
	[ -n "$id" ] && [ -f "$f" ] || exit 0
	"$afs" lease end "$mp" "$(cat "$f")" >/dev/null
	rc=$?
	rm -f "$f"
	exit $rc
	;;
stop)
	# The end of a turn: no call is running; end whatever a killed call left.
	for f in "$dir"/*; do
		[ -f "$f" ] || continue
		"$afs" lease end "$mp" "$(cat "$f")" >/dev/null 2>&1
		rm -f "$f"
	done
	rmdir "$dir" 2>/dev/null
	;;
esac
exit 0
