#!/usr/bin/env bash
# The main job end to end on the embedded default store (no server):
# create a workspace from a sample tree, fork one child per "agent", mount a
# child, run real tools inside it, advance the parent meanwhile, unmount to
# reconcile (the child is rebased once), land both children, export the
# result; two agents committing in forks of a git repository and both
# landing cleanly; a workspace from a git branch whose commit is published
# back to it; an in-place workspace; and check the store.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${ACYCLICFS_BIN:-$PWD/bin/acyclicfs}
[ -x "$B" ] || CGO_ENABLED=0 go build -o "$B" ./cmd/acyclicfs
work=$(mktemp -d /tmp/acyclicfs-demo.XXXXXX)
export ACYCLICFS_STORE="$work/store"
cleanup() {
  "$B" shutdown >/dev/null 2>&1 || true
  for m in "$work/mnt" "$work/m1" "$work/m2" "$work/m3"; do mountpoint -q "$m" 2>/dev/null && umount -l "$m" || true; done
  rm -rf "$work"
}
trap cleanup EXIT
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }

mkdir -p "$work/src/cmd" "$work/mnt" "$work/out"
printf 'package main\n\nfunc main() { println("hello") }\n' > "$work/src/cmd/main.go"
printf '# sample\n\nline one\nline two\n' > "$work/src/README.md"
printf 'module example.com/demo\n\ngo 1.21\n' > "$work/src/go.mod"

run "$B" init
run "$B" create main --from "$work/src"
run "$B" fork main agent-a
run "$B" fork main agent-b
run "$B" mount agent-a "$work/mnt"

say "agent-a's tools run inside the mount as one session (acyclicfs exec); meanwhile agent-b lands into main"
mkfifo "$work/go"
"$B" exec "$work/mnt" -- sh -c '
  echo "feature from agent-a" > feature.txt
  sed -i "s/line one/line one (edited by agent-a)/" README.md
  git init -q && git add -A && git -c user.email=a@b -c user.name=agent commit -qm "agent-a work"
  read x < "$0"   # wait while the parent advances
  echo "  [inside agent-a] the view is pinned: README.md still has $(wc -l < README.md) lines"
  git log --oneline
' "$work/go" &
exec_pid=$!
mkdir -p "$work/b" && "$B" export agent-b "$work/b" >/dev/null
printf 'line three from agent-b\n' >> "$work/b/README.md"
run "$B" commit agent-b "$work/b"
run "$B" land agent-b
echo go > "$work/go"
say "the session ends: its writes are captured and agent-a is rebased onto main's new head, once"
wait "$exec_pid"
run cat "$work/mnt/README.md"
run "$B" log agent-a -n 3
run "$B" unmount "$work/mnt"
run "$B" diff agent-a --stat
run "$B" land agent-a
run "$B" export main "$work/out"
run ls -A "$work/out"

say "two agents commit in forks of one git repository; both land, and git sees both commits"
export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.com GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.com
mkdir -p "$work/repo" "$work/m1" "$work/m2" "$work/m3"
printf '1\n2\n3\n4\n5\n6\n7\n8\n9\n' > "$work/repo/shared.txt"
git -C "$work/repo" init -q -b main && git -C "$work/repo" add -A && git -C "$work/repo" commit -qm "start"
run "$B" create repo --from "$work/repo"
run "$B" fork repo agent-c
run "$B" fork repo agent-d
run "$B" mount agent-c "$work/m1"
run "$B" mount agent-d "$work/m2"
run "$B" exec "$work/m1" -- sh -c 'sed -i "s/^2$/two (agent-c)/" shared.txt && git commit -qam "agent-c: line 2"'
run "$B" exec "$work/m2" -- sh -c 'sed -i "s/^8$/eight (agent-d)/" shared.txt && git commit -qam "agent-d: line 8"'
run "$B" land agent-c
run "$B" land agent-d
run "$B" status repo
run "$B" export repo "$work/repo-out"
run git -C "$work/repo-out" log --oneline --graph main
run git -C "$work/repo-out" status --short
run git -C "$work/repo-out" fsck --strict --no-progress
run "$B" unmount "$work/m1"
run "$B" unmount "$work/m2"

say "a workspace from a git branch, no checkout; the agent's commit goes back to the branch (git publish)"
git -C "$work/repo" branch feature
run "$B" create feat --from-git "$work/repo@feature"
run "$B" mount feat "$work/m3"
run "$B" exec "$work/m3" -- sh -c 'echo "from the agent" > agent.txt && git add agent.txt && git commit -qm "agent: add agent.txt"'
run "$B" git publish feat
run git -C "$work/repo" log --oneline feature
run git -C "$work/repo" status --short
run "$B" unmount "$work/m3"

say "in place: a workspace over a real directory, mounted over it; the unmount writes the changes back"
mkdir -p "$work/proj" && printf 'hello\n' > "$work/proj/notes.txt"
run "$B" create proj --in-place "$work/proj"
run "$B" mount proj
"$B" exec "$work/proj" -- sh -c 'echo "written under the mount" >> notes.txt && echo new > added.txt'
run "$B" unmount "$work/proj"
run cat "$work/proj/notes.txt" "$work/proj/added.txt"
run "$B" log proj -n 2
run "$B" list
run "$B" fsck
echo; echo "demo: OK"
