#!/usr/bin/env bash
# Rebuild of a lost filesystem against the disk's own copy rate, and what
# a rebuild at the default rate leaves to a client stream, in one run.
#
#   bench/rebuild/bench.sh                       # 4 GiB, 3 rounds
#   ROUNDS=5 TOTAL_MB=8192 bench/rebuild/bench.sh
#
# A `kaon up` with three filesystems (directories on the same disk) holds
# TOTAL_MB in replica:2 files of 64 KiB to 256 MiB (sizes log-uniform,
# fixed seed; every size class holds about as many bytes) on two of them.
# Each round:
#
#   1. cp -a of the surviving copy's stripe files to another directory of
#      the same disk, then sync: the disk's own copy rate (the bound: the
#      rebuild reads and writes every byte once on one device);
#   2. the other copy's filesystem goes away (its directory is renamed:
#      the storage server reports it offline, as a disk gone) and is
#      declared lost (fs config ID configstatus=lost, rebuild.rate=0: no
#      cap); timed from there to `empty` in fs ls: ratio 1 = rebuild rate
#      / cp rate;
#   3. a client stream (curl PUT then GET of STREAM_MB) alone, SAMPLES
#      times; then SAMPLES times: a filesystem holding a copy is lost
#      and rebuilt at the default rate (giving way to client streams),
#      the same stream runs while it does, and the rebuild is let finish
#      unthrottled: ratio 2 = median stream rate during the rebuild /
#      median alone.
#
# After each rebuild the lost directory comes back and is made rw again
# (its old stripes, queued for deletion, are removed by its storage
# server); it is the empty one the next rebuild writes to.
# The page cache is dropped before every timed step (root only). Medians
# of ROUNDS are printed with the load average.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
TOTAL_MB=${TOTAL_MB:-4096}
STREAM_MB=${STREAM_MB:-1024}
PARALLEL=${PARALLEL:-4}
SAMPLES=${SAMPLES:-3}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-rebuild-bench.XXXXXX")
PID=

cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
rate() { python3 -c "print('%.1f' % ($1/1048576/($3-$2)))"; } # bytes t0 t1 -> MiB/s
median() { python3 -c "import sys,statistics; print('%.2f' % statistics.median([float(x) for x in sys.argv[1:]]))" "$@"; }
ratio() { python3 -c "print('%.2f' % ($1/$2))"; }
dropcaches() {
	sync
	if [ "$(id -u)" = 0 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
}

(cd "$REPO" && go build -o "$WORK/kaon" ./cmd/kaon)
K="$WORK/kaon"
D="$WORK/k"
mkdir -p "$D"
"$K" up --data "$D" --http 127.0.0.1:0 --xrootd "" --fs 3 --cap-ttl 10s --rebuild-after 0 >"$D/out" 2>"$D/log" &
PID=$!
for _ in $(seq 300); do [ -s "$D/endpoints.json" ] && break; sleep 0.1; done
export KAON_URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$D/endpoints.json")
fsdir() { echo "$D/fs/0$1"; }
stripes() { find "$(fsdir "$1")" -mindepth 2 -type f | wc -l; }
row() { "$K" fs ls | awk -v id="$1" '$2 == id'; }
waitrow() { # id word: until fs ls shows word in fs id's row
	for _ in $(seq 36000); do
		row "$1" | grep -q " $2 " && return 0
		sleep 0.1
	done
	echo "fs $1 never showed $2: $(row "$1")" >&2
	exit 1
}
lose() { # id: its disk goes away; declared lost
	mv "$(fsdir "$1")" "$(fsdir "$1").gone"
	waitrow "$1" offline
	"$K" fs config "$1" configstatus=lost
}
restore() { # id: back, rw, its old stripes deleted
	mv "$(fsdir "$1").gone" "$(fsdir "$1")"
	waitrow "$1" booted
	"$K" fs config "$1" configstatus=rw
	for _ in $(seq 600); do [ "$(stripes "$1")" = 0 ] && break; sleep 0.1; done
}

# --- the data: replica:2 on fs 1 and 2 (fs 3 read-only while uploading) ---
"$K" fs config 3 configstatus=ro
"$K" mkdir /d
"$K" attr set /d sys.forced.layout=replica:2
SIZES=$(python3 -c "
import random
random.seed(24)
left, out = $TOTAL_MB << 20, []
while left > 0:
    s = min(int(2 ** random.uniform(16, 28)), left)
    out.append(s); left -= s
print(' '.join(map(str, out)))")
BYTES=0 N=0
for s in $SIZES; do
	head -c "$s" /dev/urandom >"$WORK/src"
	curl -sS -f -L -T "$WORK/src" "$KAON_URL/d/f$N" -o /dev/null
	BYTES=$((BYTES + s)) N=$((N + 1))
done
rm -f "$WORK/src"
"$K" fs config 3 configstatus=rw
for id in 1 2 3; do "$K" fs config "$id" rebuild.parallel="$PARALLEL"; done
head -c $((STREAM_MB << 20)) /dev/urandom >"$WORK/stream"
echo "rebuild bench: $N replica:2 files, $BYTES bytes on fs 1 and 2; $ROUNDS rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"

stream() { # one client stream: upload then download STREAM_MB; prints MiB/s
	local t0 t1
	dropcaches
	t0=$(now)
	curl -sS -f -L -T "$WORK/stream" "$KAON_URL/s/x" -o /dev/null
	curl -sS -f -L "$KAON_URL/s/x" -o /dev/null
	t1=$(now)
	"$K" rm /s/x
	rate $((2 * (STREAM_MB << 20))) "$t0" "$t1"
}

CP=() RB=() R1=() SA=() SD=() R2=()
keep=1 lost=2 spare=3 # a copy on keep and lost; spare is empty
"$K" mkdir /s
for r in $(seq "$ROUNDS"); do
	dropcaches
	t0=$(now)
	cp -a "$(fsdir "$keep")" "$WORK/cp"
	sync
	t1=$(now)
	rm -rf "$WORK/cp"
	CP+=("$(rate "$BYTES" "$t0" "$t1")")

	"$K" fs config "$lost" rebuild.rate=0
	dropcaches
	mv "$(fsdir "$lost")" "$(fsdir "$lost").gone"
	waitrow "$lost" offline
	t0=$(now)
	"$K" fs config "$lost" configstatus=lost
	waitrow "$lost" empty
	t1=$(now)
	RB+=("$(rate "$BYTES" "$t0" "$t1")")
	R1+=("$(ratio "${RB[-1]}" "${CP[-1]}")")
	restore "$lost"
	tmp=$lost lost=$spare spare=$tmp # the copies are on keep and the old spare

	a=() d=()
	for _ in $(seq "$SAMPLES"); do a+=("$(stream)"); done
	for _ in $(seq "$SAMPLES"); do
		"$K" fs config "$lost" rebuild.rate=default
		lose "$lost"
		waitrow "$lost" rebuilding
		sleep 1 # moves in flight
		d+=("$(stream)")
		row "$lost" | grep -q " rebuilding " ||
			echo "warning: the rebuild ended before the stream did (raise TOTAL_MB)" >&2
		"$K" fs config "$lost" rebuild.rate=0
		waitrow "$lost" empty
		restore "$lost"
		tmp=$lost lost=$spare spare=$tmp
	done
	SA+=("$(median "${a[@]}")")
	SD+=("$(median "${d[@]}")")
	R2+=("$(ratio "${SD[-1]}" "${SA[-1]}")")
	echo "round $r: cp -a ${CP[-1]} MiB/s, rebuild ${RB[-1]} MiB/s (ratio ${R1[-1]}); stream alone ${a[*]} MiB/s, during a default-rate rebuild ${d[*]} MiB/s (ratio of medians ${R2[-1]}); load $(cut -d' ' -f1-3 /proc/loadavg)"
done

# The data survived the trips: three files read back against their
# recorded adler32.
for i in 0 $((N / 2)) $((N - 1)); do
	want=$(curl -sS -f -I -H 'Want-Digest: adler32' "$KAON_URL/d/f$i" | tr -d '\r' | sed -n 's/^Digest: adler32=//p')
	got=$(curl -sS -f -L "$KAON_URL/d/f$i" | python3 -c 'import sys,zlib; print("%08x" % zlib.adler32(sys.stdin.buffer.read()))')
	[ "$want" = "$got" ] || { echo "/d/f$i: adler32 $got, recorded $want" >&2; exit 1; }
done

printf "\n%-50s %10s\n" "medians of $ROUNDS rounds" ""
printf "%-50s %10s\n" "cp -a + sync, MiB/s" "$(median "${CP[@]}")"
printf "%-50s %10s\n" "rebuild, MiB/s" "$(median "${RB[@]}")"
printf "%-50s %10s\n" "ratio 1: rebuild / cp -a (goal >= 0.7)" "$(median "${R1[@]}")"
printf "%-50s %10s\n" "client stream alone, MiB/s" "$(median "${SA[@]}")"
printf "%-50s %10s\n" "client stream during a default-rate rebuild" "$(median "${SD[@]}")"
printf "%-50s %10s\n" "ratio 2: stream during / alone (goal >= 0.5)" "$(median "${R2[@]}")"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
