#!/usr/bin/env bash
# Benchmark `kaon cfsd` against the directory below it, in one run.
#
#   sudo bench/cfsd/bench.sh            # RUNS=3 DD_MB=2048 by default
#   RUNS=5 WORK=/data/bench MOUNT_OPTS="--no-passthrough" bench/cfsd/bench.sh
#   DD_MB=0 bench/cfsd/bench.sh          # metadata workloads only
#
# For each workload the backend directory and the mount are measured
# alternately RUNS times; the script prints the medians and the ratio:
# mount/backend throughput for dd and untar (goal >= 0.95 / 0.9) and
# mount/backend time for listings (goal <= 1.5). Workloads:
#   dd write  2 GiB, bs=1M, conv=fsync            -> MB/s
#   dd read   same file after drop_caches          -> MB/s
#   untar     tarball of $(go env GOROOT)/src      -> files/s
#   ls -lR and find -ls, cold (drop_caches) and warm -> seconds
# Needs root (mount, drop_caches).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
DD_MB=${DD_MB:-2048}
WORK=${WORK:-/tmp/kaon-cfsd-bench}
MOUNT_OPTS=${MOUNT_OPTS:-}
KAON=${KAON:-$WORK/kaon}

mkdir -p "$WORK"
[ -x "$KAON" ] || go build -o "$KAON" ./cmd/kaon
B=$WORK/backend M=$WORK/mnt
mkdir -p "$B" "$M"
fusermount3 -uz "$M" 2>/dev/null || true
"$KAON" cfsd mount --backend "$B" $MOUNT_OPTS --log "$WORK/cfsd.log" "$M"
trap '"$KAON" cfsd umount "$M" || fusermount3 -uz "$M"' EXIT
mkdir -p "$B/bk" "$M/mt"   # backend side, mount side (same file system)
BK=$B/bk MT=$M/mt

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

for i in $(seq 1 "$RUNS"); do
  order="bk mt"; [ $((i % 2)) = 0 ] && order="mt bk"   # alternate who goes first
  for side in $order; do
    D=$BK; [ $side = mt ] && D=$MT
    if [ "$DD_MB" -gt 0 ]; then
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
    # listings, cold then warm
    drop; add "lsc_$side" "$(timeit ls -lR "$D/src")"
    add "lsw_$side" "$(timeit ls -lR "$D/src")"
    drop; add "findc_$side" "$(timeit find "$D/src" -ls)"
    add "findw_$side" "$(timeit find "$D/src" -ls)"
    rm -rf "$D/src"
  done
done

echo "kaon cfsd benchmark: $RUNS runs, medians; backend $(findmnt -n -o FSTYPE -T "$B") at $B; $(uname -r)"
echo "mount options: ${MOUNT_OPTS:-(default)}; data path: $(grep -o '"data_path": "[a-z]*"' "$M/.proc/stats.json")"
printf '%-22s %14s %14s %10s\n' workload backend mount ratio
line() { # name key unit better(hi|lo)
  local b m r
  b=$(median ${R[${2}_bk]}); m=$(median ${R[${2}_mt]})
  r=$(calc "$m / $b")
  printf '%-22s %14.3f %14.3f %9.3f %s\n' "$1 ($3)" "$b" "$m" "$r" "$([ "$4" = hi ] && echo '(throughput mount/backend)' || echo '(time mount/backend)')"
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
for k in "${!R[@]}"; do echo "raw $k:${R[$k]}"; done | sort
