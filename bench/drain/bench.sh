#!/usr/bin/env bash
# Drain throughput against the disk's own copy rate, and what a throttled
# drain leaves to a client stream, in one run.
#
#   bench/drain/bench.sh                         # 4 GiB, 3 rounds
#   ROUNDS=5 TOTAL_MB=8192 THROTTLE=100M bench/drain/bench.sh
#
# A `kaon up` with two filesystems (directories on the same disk) holds
# TOTAL_MB in plain files of 1 MiB to 256 MiB (sizes log-uniform, fixed
# seed) on one of them. Each round:
#
#   1. cp -a of that filesystem's stripe files to another directory of the
#      same disk, then sync: the disk's own copy rate (the bound: every
#      byte is read and written once on one device);
#   2. the filesystem is drained to the other (drain.parallel=PARALLEL, no
#      rate cap), timed from `fs config ID configstatus=drain` to `drained`
#      in fs ls: ratio 1 = drain rate / cp rate;
#   3. a client stream (curl PUT then GET of STREAM_MB) alone, then the
#      same stream while the data drains back with drain.rate=THROTTLE,
#      SAMPLES times each (this VM's disk alone varies by 2x from one
#      stream to the next): ratio 2 = median stream rate during the drain
#      / median stream rate alone.
#
# The page cache is dropped before every timed step (root only; without
# it the numbers flatter whatever read the data last). Medians of ROUNDS
# are printed with the load average.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
TOTAL_MB=${TOTAL_MB:-4096}
STREAM_MB=${STREAM_MB:-1024}
THROTTLE=${THROTTLE:-64M}
PARALLEL=${PARALLEL:-4}
SAMPLES=${SAMPLES:-3}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-drain-bench.XXXXXX")
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
"$K" up --data "$D" --http 127.0.0.1:0 --xrootd "" --fs 2 --cap-ttl 10s >"$D/out" 2>"$D/log" &
PID=$!
for _ in $(seq 300); do [ -s "$D/endpoints.json" ] && break; sleep 0.1; done
export KAON_URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$D/endpoints.json")
fsdir() { echo "$D/fs/0$1"; }
stripes() { find "$(fsdir "$1")" -mindepth 2 -type f | wc -l; }
waitrow() { # id word: until fs ls shows word in fs id's row
	for _ in $(seq 36000); do
		"$K" fs ls | awk -v id="$1" '$2 == id' | grep -q " $2 " && return 0
		sleep 0.1
	done
	echo "fs $1 never showed $2" >&2
	exit 1
}

# --- the data: on fs 1 only (fs 2 read-only while uploading) ---
"$K" fs config 2 configstatus=ro
"$K" mkdir /d
SIZES=$(python3 -c "
import random
random.seed(14)
total, left, out = 0, $TOTAL_MB << 20, []
while left > 0:
    s = min(int(2 ** random.uniform(20, 28)), left)
    out.append(s); left -= s
print(' '.join(map(str, out)))")
BYTES=0 N=0
for s in $SIZES; do
	head -c "$s" /dev/urandom >"$WORK/src"
	curl -sS -f -L -T "$WORK/src" "$KAON_URL/d/f$N" -o /dev/null
	BYTES=$((BYTES + s)) N=$((N + 1))
done
rm -f "$WORK/src"
"$K" fs config 2 configstatus=rw
for id in 1 2; do "$K" fs config "$id" drain.parallel="$PARALLEL"; done
head -c $((STREAM_MB << 20)) /dev/urandom >"$WORK/stream"
echo "drain bench: $N files, $BYTES bytes on fs 1; $ROUNDS rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"

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

drain() { # src rate: drain fs src; waits until drained and puts it back in rw
	"$K" fs config "$1" drain.rate="$2"
	"$K" fs config "$1" configstatus=drain
}

CP=() DR=() R1=() SA=() SD=() R2=()
src=1 dst=2
"$K" mkdir /s
for r in $(seq "$ROUNDS"); do
	# the stripes the last drain moved off dst are deleted after the grace
	for _ in $(seq 600); do [ "$(stripes "$dst")" = 0 ] && break; sleep 0.1; done

	dropcaches
	t0=$(now)
	cp -a "$(fsdir "$src")" "$WORK/cp"
	sync
	t1=$(now)
	rm -rf "$WORK/cp"
	CP+=("$(rate "$BYTES" "$t0" "$t1")")

	dropcaches
	t0=$(now)
	drain "$src" 0
	waitrow "$src" drained
	t1=$(now)
	"$K" fs config "$src" configstatus=rw
	DR+=("$(rate "$BYTES" "$t0" "$t1")")
	R1+=("$(ratio "${DR[-1]}" "${CP[-1]}")")
	tmp=$src src=$dst dst=$tmp

	for _ in $(seq 600); do [ "$(stripes "$dst")" = 0 ] && break; sleep 0.1; done
	a=() d=()
	for _ in $(seq "$SAMPLES"); do a+=("$(stream)"); done
	drain "$src" "$THROTTLE"
	waitrow "$src" draining
	sleep 2 # moves in flight
	for _ in $(seq "$SAMPLES"); do d+=("$(stream)"); done
	SA+=("$(median "${a[@]}")")
	SD+=("$(median "${d[@]}")")
	R2+=("$(ratio "${SD[-1]}" "${SA[-1]}")")
	still=$("$K" fs ls | awk -v id="$src" '$2 == id' | grep -c " draining " || true)
	[ "$still" = 1 ] || echo "warning: the throttled drain ended before the last stream sample (raise TOTAL_MB or lower THROTTLE)" >&2
	"$K" fs config "$src" drain.rate=0
	waitrow "$src" drained
	"$K" fs config "$src" configstatus=rw
	tmp=$src src=$dst dst=$tmp
	echo "round $r: cp -a ${CP[-1]} MiB/s, drain ${DR[-1]} MiB/s (ratio ${R1[-1]}); stream alone ${a[*]} MiB/s, during drain at $THROTTLE/s ${d[*]} MiB/s (ratio of medians ${R2[-1]}); load $(cut -d' ' -f1-3 /proc/loadavg)"
done

# The data survived the trips: three files read back against their
# recorded adler32 (the read recomputes it end to end in curl's output).
for i in 0 $((N / 2)) $((N - 1)); do
	want=$(curl -sS -f -I -H 'Want-Digest: adler32' "$KAON_URL/d/f$i" | tr -d '\r' | sed -n 's/^Digest: adler32=//p')
	got=$(curl -sS -f -L "$KAON_URL/d/f$i" | python3 -c 'import sys,zlib; print("%08x" % zlib.adler32(sys.stdin.buffer.read()))')
	[ "$want" = "$got" ] || { echo "/d/f$i: adler32 $got, recorded $want" >&2; exit 1; }
done

printf "\n%-44s %10s\n" "medians of $ROUNDS rounds" ""
printf "%-44s %10s\n" "cp -a + sync, MiB/s" "$(median "${CP[@]}")"
printf "%-44s %10s\n" "drain, MiB/s" "$(median "${DR[@]}")"
printf "%-44s %10s\n" "ratio 1: drain / cp -a (goal >= 0.7)" "$(median "${R1[@]}")"
printf "%-44s %10s\n" "client stream alone, MiB/s" "$(median "${SA[@]}")"
printf "%-44s %10s\n" "client stream during drain at $THROTTLE/s" "$(median "${SD[@]}")"
printf "%-44s %10s\n" "ratio 2: stream during / alone (goal >= 0.5)" "$(median "${R2[@]}")"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
