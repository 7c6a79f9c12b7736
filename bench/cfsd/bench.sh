#!/usr/bin/env bash
# Benchmark `kaon cfsd` against the directory below it, in one run.
#
#   sudo bench/cfsd/bench.sh            # RUNS=3 DD_MB=2048 by default
#   RUNS=5 WORK=/data/bench MOUNT_OPTS="--no-passthrough" bench/cfsd/bench.sh
#   DD_MB=0 bench/cfsd/bench.sh          # metadata workloads only
#   BACKEND=/mnt/ceph/cfsd bench/cfsd/bench.sh   # the backend elsewhere (a CephFS
#                                        # mount: bench/ceph/cfsd.sh); NULLFS=0 skips nullfs
#
# For each workload the backend directory and the mount are measured
# alternately RUNS times; the script prints the medians and the ratio:
# mount/backend throughput for dd and untar (goal >= 0.95 / 0.9) and
# mount/backend time for listings (goal <= 1.5). Workloads:
#   dd write  2 GiB, bs=1M, conv=fsync            -> MB/s
#   dd read   same file after drop_caches          -> MB/s
#   untar     tarball of $(go env GOROOT)/src      -> files/s
#   ls -lR and find -ls, cold (drop_caches) and warm -> seconds
#   mdtest-style: one process creates $MD_FILES empty files in one directory,
#   then stats each by name (warm, then cold after drop_caches), then
#   removes them                                   -> operations/s
# untar also runs on nullfs (bench/cfsd/nullfs): a FUSE file system with
# the same mount options that keeps its tree in memory and discards data.
# Its column is the ceiling of any FUSE file system on this machine for
# that workload: the cost of the kernel round trips alone.
# Needs root (mount, drop_caches).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
DD_MB=${DD_MB:-2048}
WORK=${WORK:-/tmp/kaon-cfsd-bench}
MOUNT_OPTS=${MOUNT_OPTS:-}
KAON=${KAON:-$WORK/kaon}
MD_FILES=${MD_FILES:-10000}

mkdir -p "$WORK"
[ -x "$KAON" ] || go build -o "$KAON" ./cmd/kaon
NULL=${NULLFS:-$WORK/nullfs}
[ "$NULL" = 0 ] || [ -x "$NULL" ] || go build -o "$NULL" ./bench/cfsd/nullfs
B=${BACKEND:-$WORK/backend} M=$WORK/mnt N=$WORK/null
mkdir -p "$B" "$M" "$N"
fusermount3 -uz "$M" 2>/dev/null || true
fusermount3 -uz "$N" 2>/dev/null || true
"$KAON" cfsd mount --backend "$B" $MOUNT_OPTS --log "$WORK/cfsd.log" "$M"
NULLPID=
if [ "$NULL" != 0 ]; then
  "$NULL" "$N" 2>"$WORK/nullfs.log" &
  NULLPID=$!
  for _ in $(seq 50); do findmnt -n "$N" >/dev/null && break; sleep 0.1; done
fi
trap '"$KAON" cfsd umount "$M" || fusermount3 -uz "$M"; [ -z "$NULLPID" ] || { kill $NULLPID; wait $NULLPID; }' EXIT
mkdir -p "$B/bk" "$M/mt"   # backend side, mount side (same file system)
BK=$B/bk MT=$M/mt NL=$N

TAR=$WORK/gosrc.tar
if [ ! -f "$TAR" ]; then tar -C "$(go env GOROOT)" -cf "$TAR" src; fi
NFILES=$(tar -tf "$TAR" | wc -l)

now() { date +%s.%N; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# timeit CMD... -> seconds on stdout
calc() { awk "BEGIN{printf \"%.6f\", $*}"; }
timeit() { local t0 t1; t0=$(now); "$@" >/dev/null 2>&1; t1=$(now); calc "$t1 - $t0"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }

declare -A R
add() { R[$1]="${R[$1]:-} $2"; }

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$RUNS"); do
  order="bk mt nl"; [ $((i % 2)) = 0 ] && order="nl mt bk"   # alternate who goes first
  [ -n "$NULLPID" ] || order=${order/nl/}
  for side in $order; do
    D=$BK; [ $side = mt ] && D=$MT; [ $side = nl ] && D=$NL
    if [ "$DD_MB" -gt 0 ] && [ $side != nl ]; then
      drop
      t=$(timeit dd if=/dev/zero of="$D/dd.bin" bs=1M count="$DD_MB" conv=fsync)
      add "ddw_$side" "$(calc "$DD_MB / $t")"
      drop
      t=$(timeit dd if="$D/dd.bin" of=/dev/null bs=1M)
      add "ddr_$side" "$(calc "$DD_MB / $t")"
      rm -f "$D/dd.bin"
    fi
    # untar
    rm -rf "$D/src"; drop
    t=$(timeit tar -C "$D" -xf "$TAR")
    add "untar_$side" "$(calc "$NFILES / $t")"
    # listings, cold then warm (not on nullfs: its directories are go-fuse's
    # plain defaults, no ceiling for a tuned readdir)
    if [ $side != nl ]; then
      drop; add "lsc_$side" "$(timeit ls -lR "$D/src")"
      add "lsw_$side" "$(timeit ls -lR "$D/src")"
      drop; add "findc_$side" "$(timeit find "$D/src" -ls)"
      add "findw_$side" "$(timeit find "$D/src" -ls)"
    fi
    rm -rf "$D/src"
    # mdtest-style create / stat / remove (one process, one directory)
    mkdir -p "$D/md"
    for kv in $(python3 - "$D/md" "$MD_FILES" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
names = [os.path.join(d, "f%07d" % i) for i in range(n)]
def rate(key, fn):
    t = time.perf_counter()
    for p in names: fn(p)
    print("%s=%.1f" % (key, n / (time.perf_counter() - t)))
rate("mdc", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)))
rate("mds", os.stat)
os.system("sync; echo 3 > /proc/sys/vm/drop_caches")
rate("mdsc", os.stat)
rate("mdr", os.unlink)
PY
    ); do add "${kv%%=*}_$side" "${kv#*=}"; done
    rmdir "$D/md"
  done
done

echo "kaon cfsd benchmark: $RUNS runs, medians; backend $(findmnt -n -o FSTYPE -T "$B") at $B; $(uname -r)"
echo "load average at start: $LOAD0; at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "mount options: ${MOUNT_OPTS:-(default)}; data path: $(grep -o '"data_path": "[a-z]*"' "$M/.proc/stats.json")"
printf '%-24s %10s %10s %8s %10s %12s\n' workload backend mount ratio nullfs nullfs-ratio
line() { # name key unit better(hi|lo)
  local b m r n nr="-"
  b=$(median ${R[${2}_bk]}); m=$(median ${R[${2}_mt]}); n=-
  r=$(calc "$m / $b")
  if [ -n "${R[${2}_nl]:-}" ]; then n=$(median ${R[${2}_nl]}); nr=$(calc "$n / $b"); fi
  printf '%-24s %10.3f %10.3f %8.3f %10s %12s %s\n' "$1 ($3)" "$b" "$m" "$r" "$n" "$nr" "$([ "$4" = hi ] && echo '(throughput vs backend)' || echo '(time vs backend)')"
}
if [ "$DD_MB" -gt 0 ]; then
  line "dd write ${DD_MB}MiB" ddw MB/s hi
  line "dd read ${DD_MB}MiB" ddr MB/s hi
fi
line "untar $NFILES files" untar files/s hi
line "ls -lR cold" lsc s lo
line "ls -lR warm" lsw s lo
line "find -ls cold" findc s lo
line "find -ls warm" findw s lo
line "mdtest create" mdc ops/s hi
line "mdtest stat warm" mds ops/s hi
line "mdtest stat cold" mdsc ops/s hi
line "mdtest remove" mdr ops/s hi
for k in "${!R[@]}"; do echo "raw $k:${R[$k]}"; done | sort
