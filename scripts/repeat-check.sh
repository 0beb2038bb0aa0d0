#!/usr/bin/env bash
# The repeat check to run before stopping: clone the committed HEAD into a
# fresh directory (nothing from the working tree, no build cache of the
# repository's own) and run CI's entry, .ci/run, there N times in a row
# (default 2), as CI runs it: CI=true, no standard input. Prints the time
# and outcome of each run; keeps each run's log. Exits non-zero if any run
# failed. A flaky test shows up here before it costs a stop.
#
#   scripts/repeat-check.sh [N]          # logs under $TMPDIR/acyclicfs-repeat.XXXX
set -uo pipefail

n="${1:-2}"
case "$n" in ''|*[!0-9]*|0) echo "repeat-check: N must be a positive number, got '$n'" >&2; exit 2 ;; esac
src="$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)" || exit 2
head="$(git -C "$src" rev-parse --short HEAD)" || exit 2
if [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
  echo "repeat-check: note: uncommitted changes are not checked (HEAD $head is)" >&2
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/acyclicfs-repeat.XXXXXX")"
git clone -q --no-hardlinks "$src" "$work/repo" || exit 2
git -C "$work/repo" checkout -q "$head" || exit 2
echo "repeat-check: $n run(s) of .ci/run at $head in $work/repo"
failed=0
for i in $(seq 1 "$n"); do
  log="$work/run-$i.log"
  start=$(date +%s)
  (cd "$work/repo" && CI=true bash .ci/run </dev/null >"$log" 2>&1)
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then outcome=green; else outcome="RED (exit $rc)"; failed=1; fi
  printf 'repeat-check: run %d: %s in %dm%02ds (log %s)\n' "$i" "$outcome" $((secs / 60)) $((secs % 60)) "$log"
  if [ $rc -ne 0 ]; then
    grep -E '^(--- FAIL|FAIL|panic:)' "$log" | head -20 | sed 's/^/  /'
  fi
done
# The logs stay for reading; the clone goes.
rm -rf "$work/repo"
[ $failed -eq 0 ] && echo "repeat-check: all $n runs green" || echo "repeat-check: a run failed"
exit $failed
