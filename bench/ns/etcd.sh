#!/usr/bin/env bash
# The namespace on etcd against the namespace on Pebble, in one run:
# `kaon bench ns` (in-process: the namespace over the active server's
# pipeline and replica, exactly as in kaon mgm --meta etcd://...) on a
# 3-member etcd cluster of Debian's etcd-server on this machine, and on the
# embedded Pebble engine, alternating, ROUNDS times each.
#
#   bench/ns/etcd.sh                      # 100 000 files in 1 000 dirs, 3 rounds
#   FILES=1000000 ROUNDS=1 bench/ns/etcd.sh
#
# Prints each run's table (creates, stats, lists, deletes per second and
# the namespace holder's RSS with every file present), the medians and
# the etcd/Pebble ratio, what etcd holds per file (database bytes in use
# after compaction, from the bench's report), and the peak RSS of each etcd
# member. The cluster runs with the limits the tests use (--max-txn-ops
# 4096, --max-request-bytes 8 MiB), an 8 GiB space quota and the map
# freelist (3.5's default; what docs/DESIGN-NOTES.md asks sites to run).
#
# The floor: after each etcd round, bench/ns/etcdfloor writes FILES x 3
# plain puts into the same cluster in guarded transactions of 4 096, one
# at a time (the pipeline's order), from a light client. Printed beside
# the etcd rounds: the writes (puts + deletes, from etcd's own counters)
# Kaon drove into etcd per second of its writing phases (mkdir, create,
# delete), and that run's put rate — how near Kaon comes to what etcd
# itself takes on this machine.
set -euo pipefail

FILES=${FILES:-100000}
DIRS=${DIRS:-1000}
WORKERS=${WORKERS:-512}
ROUNDS=${ROUNDS:-3}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-ns-etcd.XXXXXX")

cleanup() {
	"$REPO/scripts/etcd-dev.sh" purge "$WORK/etcd" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT

median() { python3 -c "import sys,statistics; print('%.0f' % statistics.median([float(x) for x in sys.argv[1:]]))" "$@"; }
ratio() { python3 -c "import sys; print('%.2f' % ($1/$2))"; }

(cd "$REPO" && go build -o "$WORK/kaon" ./cmd/kaon && go build -o "$WORK/etcdfloor" ./bench/ns/etcdfloor)
ETCD_DEV_FLAGS="--quota-backend-bytes 8589934592 --experimental-backend-bbolt-freelist-type map" "$REPO/scripts/etcd-dev.sh" start "$WORK/etcd" 3 >/dev/null
META="etcd://$(sed 's|http://||g' "$WORK/etcd/endpoints")"
FIRST=$(cut -d, -f1 "$WORK/etcd/endpoints")
# writes: puts + deletes etcd's first member has applied (every member
# applies every write).
writes() { curl -s "$FIRST/metrics" | awk '/^etcd_mvcc_(put|delete)_total / {n += $2} END {print n}'; }
echo "kaon bench ns: $FILES files in $DIRS directories, $WORKERS workers, $ROUNDS rounds; etcd $(etcd --version | head -1 | awk '{print $3}'), 3 members on this host"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

declare -A rate
for ((r = 1; r <= ROUNDS; r++)); do
	for engine in pebble etcd; do
		out="$WORK/$engine.$r.out"
		args=(bench ns --files "$FILES" --dirs "$DIRS" --workers "$WORKERS" --dir "$WORK/$engine.$r")
		if [ "$engine" = etcd ]; then
			args+=(--meta "$META/bench$r" --meta-txn-ops 4096 --meta-request-bytes 8388608)
		fi
		[ "$engine" = etcd ] && w0=$(writes)
		"$WORK/kaon" "${args[@]}" >"$out" 2>&1
		echo "--- round $r, $engine (load $(cut -d' ' -f1 /proc/loadavg))"
		cat "$out"
		if [ "$engine" = etcd ]; then
			secs=$(awk '$1 == "mkdir" || $1 == "create" || $1 == "delete" {s += $3} END {print s}' "$out")
			drove=$(python3 -c "print('%.0f' % (($(writes) - $w0) / $secs))")
			floor=$("$WORK/etcdfloor" --endpoints "$(cat "$WORK/etcd/endpoints")" --puts $((FILES * 3)) --ops 4096 --inflight 1)
			echo "etcd writes/s: kaon drove $drove in its writing phases; etcdfloor: $floor"
			rate[etcd.drove]+=" $drove"
			rate[etcd.floor]+=" ${floor%% *}"
		fi
		rm -rf "${WORK:?}/$engine.$r"
		for phase in create stat list delete; do
			rate[$engine.$phase]+=" $(awk -v p="$phase" '$1 == p {print $4}' "$out")"
		done
		rate[$engine.rss]+=" $(sed -n 's/.*held [0-9]* files: \([0-9]*\) MiB/\1/p' "$out")"
	done
done

echo
echo "medians of $ROUNDS rounds (ops/s; RSS in MiB)"
printf "%-8s %10s %10s %8s\n" phase pebble etcd etcd/pebble
for phase in create stat list delete rss; do
	p=$(median ${rate[pebble.$phase]}) e=$(median ${rate[etcd.$phase]})
	printf "%-8s %10s %10s %8s\n" "$phase" "$p" "$e" "$(ratio "$e" "$p")"
done
d=$(median ${rate[etcd.drove]}) f=$(median ${rate[etcd.floor]})
echo "etcd writes/s: kaon $d, etcdfloor $f (kaon/floor $(ratio "$d" "$f"))"
echo "etcd members' peak RSS (MiB):"
for f in "$WORK"/etcd/m*.pid; do
	awk '/VmHWM/ {printf "  %.0f\n", $2/1024}' "/proc/$(cat "$f")/status"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
