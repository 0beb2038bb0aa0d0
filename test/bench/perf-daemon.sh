#!/bin/bash
# Profile the acyclicfs daemon with perf during untar, git add+commit,
# create+unlink and find on a scratch store: perf record -g of the daemon
# plus fsync/fdatasync/openat counts (perf stat). Run as root from the repo
# root after `make build`: test/bench/perf-daemon.sh > /tmp/prof.out 2>&1
set -u
W=${W:-/tmp/bprof}; B=${ACYCLICFS_BIN:-$PWD/bin/acyclicfs}
rm -rf $W; mkdir -p $W/lower/goroot $W/mnt
export ACYCLICFS_STORE=$W/store
cleanup() { $B shutdown >/dev/null 2>&1; mountpoint -q $W/mnt && umount -l $W/mnt; }
trap cleanup EXIT
tar -C "$(go env GOROOT)" -cf $W/src.tar src
tar -C $W/lower/goroot -xf $W/src.tar
$B init >/dev/null && $B create base --from $W/lower >/dev/null && $B fork base w >/dev/null && $B mount w $W/mnt >/dev/null
PID=$(for p in /proc/[0-9]*; do tr '\0' ' ' 2>/dev/null < $p/cmdline | grep -q "^$B --store $W/store daemon" && basename $p; done | head -1)
echo daemon pid $PID
prof() { # name script
  perf record -F 299 -g -p $PID -o $W/$1.data 2>/dev/null & PR=$!
  perf stat -e 'syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync,syscalls:sys_enter_renameat2,syscalls:sys_enter_renameat,syscalls:sys_enter_openat' -p $PID -o $W/$1.stat & PS=$!
  sleep 0.5
  /usr/bin/time -f "$1 exec wall %e s" $B exec $W/mnt -- sh -c "s=\$(date +%s%N); $2; e=\$(date +%s%N); echo $1 workload \$(( (e-s)/1000000 )) ms"
  kill -INT $PR $PS; wait $PR $PS 2>/dev/null
}
prof untar "mkdir -p $W/mnt/untar && tar -xf $W/src.tar -C $W/mnt/untar"
prof gitcommit "cd $W/mnt/goroot && git init -q && git add -A && git -c user.name=b -c user.email=b@x commit -qm x"
prof createunlink "mkdir $W/mnt/cu && cd $W/mnt/cu && seq -f f%g 10000 | xargs touch && seq -f f%g 10000 | xargs rm"
prof find "find $W/mnt/goroot -printf x >/dev/null; find $W/mnt/goroot -printf %s >/dev/null"
for n in untar gitcommit createunlink find; do echo "== $n"; cat $W/$n.stat | grep -E "syscalls|elapsed"; perf report -i $W/$n.data --no-children --sort symbol --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -25; done
