#!/usr/bin/env bash
# FUSE over io_uring against /dev/fuse, side by side in one run: two
# `kaon cfsd` mounts from the same binary over two directories of the
# same file system, one with --io-uring, measured alternately ROUNDS
# times; prints medians and the ratio io_uring / /dev/fuse.
#
#   sudo bench/cfsd/uring.sh                 # ROUNDS=5 FILES=2000 DD_MB=256
#
# Both mounts cache nothing in the kernel (--entry-timeout 0
# --attr-timeout 0 --negative-timeout 0) and send file data through the
# daemon (--no-passthrough), so every operation is a round trip through
# the transport under test:
#   stat    one process stats one file FILES*5 times (GETATTR each)   -> ops/s
#   create  one process creates FILES empty files in one directory      -> ops/s
#   statall stats each of them                                          -> ops/s
#   remove  removes them                                                -> ops/s
#   dd      writes DD_MB MiB (bs=1M), reads it back (after drop_caches)  -> MB/s
# Needs root and /sys/module/fuse/parameters/enable_uring=Y (the script
# turns it on and restores it).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-5} FILES=${FILES:-2000} DD_MB=${DD_MB:-256}
WORK=${WORK:-/tmp/kaon-cfsd-uring}
KAON=${KAON:-$WORK/kaon}
mkdir -p "$WORK"
[ -x "$KAON" ] || go build -o "$KAON" ./cmd/kaon
PARAM=/sys/module/fuse/parameters/enable_uring
OLD=$(cat $PARAM)
echo Y > $PARAM
OPTS="--entry-timeout 0 --attr-timeout 0 --negative-timeout 0 --no-passthrough"
for s in dev ur; do mkdir -p "$WORK/b$s" "$WORK/m$s"; fusermount3 -uz "$WORK/m$s" 2>/dev/null || true; done
"$KAON" cfsd mount --backend "$WORK/bdev" $OPTS --log "$WORK/dev.log" "$WORK/mdev"
"$KAON" cfsd mount --backend "$WORK/bur" $OPTS --io-uring --log "$WORK/ur.log" "$WORK/mur"
trap '"$KAON" cfsd umount "$WORK/mdev"; "$KAON" cfsd umount "$WORK/mur"; echo $OLD > $PARAM' EXIT
grep -q '"transport": "io_uring"' "$WORK/mur/.proc/stats.json" || { echo "io_uring not active"; exit 1; }
grep -q '"transport": "/dev/fuse"' "$WORK/mdev/.proc/stats.json"

calc() { awk "BEGIN{printf \"%.6f\", $*}"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
declare -A R
add() { R[$1]="${R[$1]:-} $2"; }
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$ROUNDS"); do
  order="dev ur"; [ $((i % 2)) = 0 ] && order="ur dev"
  for s in $order; do
    D=$WORK/m$s/r; mkdir -p "$D"
    for kv in $(python3 - "$D" "$FILES" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
names = [os.path.join(d, "f%07d" % i) for i in range(n)]
def rate(key, fn, ps):
    t = time.perf_counter()
    for p in ps: fn(p)
    print("%s=%.1f" % (key, len(ps) / (time.perf_counter() - t)))
rate("create", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)), names)
rate("stat", os.stat, [names[0]] * (5 * n))
rate("statall", os.stat, names)
rate("remove", os.unlink, names)
PY
    ); do add "${kv%%=*}_$s" "${kv#*=}"; done
    if [ "$DD_MB" -gt 0 ]; then
      t0=$(date +%s.%N); dd if=/dev/zero of="$D/dd" bs=1M count="$DD_MB" conv=fsync 2>/dev/null; t1=$(date +%s.%N)
      add "ddw_$s" "$(calc "$DD_MB / ($t1 - $t0)")"
      sync; echo 3 > /proc/sys/vm/drop_caches
      t0=$(date +%s.%N); dd if="$D/dd" of=/dev/null bs=1M 2>/dev/null; t1=$(date +%s.%N)
      add "ddr_$s" "$(calc "$DD_MB / ($t1 - $t0)")"
      rm -f "$D/dd"
    fi
    rmdir "$D"
  done
done
echo "FUSE over io_uring vs /dev/fuse (kaon cfsd, $OPTS): $ROUNDS rounds, medians; $(uname -r), $(nproc) CPUs"
echo "load average at start: $LOAD0; at end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-22s %12s %12s %8s\n' workload /dev/fuse io_uring ratio
for k in stat create statall remove ddw ddr; do
  [ -n "${R[${k}_dev]:-}" ] || continue
  a=$(median ${R[${k}_dev]}); b=$(median ${R[${k}_ur]})
  printf '%-22s %12.1f %12.1f %8.3f\n' "$k" "$a" "$b" "$(calc "$b / $a")"
done
for k in "${!R[@]}"; do echo "raw $k:${R[$k]}"; done | sort
