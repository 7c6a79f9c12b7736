#!/usr/bin/env bash
# Compare two builds of Kaon with `kaon bench stream`, alternating them
# round by round on the same disk (slow drifts of the machine's load then
# hit both alike), and print per build the median aggregate MiB/s and
# server CPU seconds per GiB moved, per layout and operation, the median
# server and client (the bench process) CPU seconds of a round, and the
# ratios new/old. The client's CPU counts: a server handing files to the
# kernel (sendfile) leaves the first touch of cold page-cache pages to the
# receiver, which on this VM is most of a cold read's cost
# (docs/DESIGN-NOTES.md, block checksums).
#
#   bench/builds.sh OLD_BINARY NEW_BINARY
#   ROUNDS=5 STREAMS=8 SIZE=256M LAYOUTS=plain,ec:4+2 bench/builds.sh old new
set -euo pipefail
OLD=$1 NEW=$2
ROUNDS=${ROUNDS:-3} STREAMS=${STREAMS:-8} SIZE=${SIZE:-256M} LAYOUTS=${LAYOUTS:-plain,replica:2,ec:4+2}
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-builds.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
run() { # run NAME BINARY ROUND
	local dir="$WORK/$1-$3"
	"$2" up --data "$dir/d" --http 127.0.0.1:0 --xrootd "" >"$dir.log" 2>&1 &
	local pid=$!
	for _ in $(seq 300); do [ -s "$dir/d/endpoints.json" ] && break; sleep 0.1; done
	/usr/bin/time -f "%U %S" -o "$dir.ccpu" \
		"$2" bench stream --data "$dir/d" --streams "$STREAMS" --size "$SIZE" --layouts "$LAYOUTS" >"$dir.out"
	# utime+stime of the server, in clock ticks
	awk '{print ($14+$15)/100}' "/proc/$pid/stat" >"$dir.cpu"
	kill "$pid"; wait "$pid" 2>/dev/null || true
	rm -rf "$dir"
}
for r in $(seq "$ROUNDS"); do
	if (( r % 2 )); then run old "$OLD" "$r"; run new "$NEW" "$r"; else run new "$NEW" "$r"; run old "$OLD" "$r"; fi
	echo "round $r done" >&2
done
python3 - "$WORK" "$ROUNDS" <<'PY'
import glob, re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def table(name):
    rows, opcpu, cpu, ccpu = {}, {}, [], []
    for r in range(1, rounds + 1):
        for line in open(f"{work}/{name}-{r}.out"):
            f = line.split()
            if len(f) >= 12 and f[1] in ("write", "read") and not f[0].startswith("raw"):
                rows.setdefault((f[0], f[1]), []).append(float(f[7]))
                if f[11] != "-":
                    opcpu.setdefault((f[0], f[1]), []).append(float(f[11]))
        cpu.append(float(open(f"{work}/{name}-{r}.cpu").read()))
        ccpu.append(sum(map(float, open(f"{work}/{name}-{r}.ccpu").read().split()[-2:])))
    med = lambda d: {k: statistics.median(v) for k, v in d.items()}
    return med(rows), med(opcpu), statistics.median(cpu), statistics.median(ccpu)
old, ocpuop, ocpu, occpu = table("old")
new, ncpuop, ncpu, nccpu = table("new")
print(f"{'layout':>10} {'op':>6} {'old MiB/s':>10} {'new MiB/s':>10} {'new/old':>8} {'old cpu s/GiB':>14} {'new cpu s/GiB':>14} {'new/old':>8}")
for k in sorted(old):
    oc, nc = ocpuop.get(k, float("nan")), ncpuop.get(k, float("nan"))
    print(f"{k[0]:>10} {k[1]:>6} {old[k]:>10.1f} {new[k]:>10.1f} {new[k]/old[k]:>8.2f} {oc:>14.2f} {nc:>14.2f} {nc/oc if oc else float('nan'):>8.2f}")
print(f"server CPU seconds per round (median): old {ocpu:.2f}  new {ncpu:.2f}  new/old {ncpu/ocpu:.2f}")
print(f"client CPU seconds per round (median): old {occpu:.2f}  new {nccpu:.2f}  new/old {nccpu/occpu:.2f}")
print(f"server+client (sum of the medians):    old {ocpu+occpu:.2f}  new {ncpu+nccpu:.2f}  new/old {(ncpu+nccpu)/(ocpu+occpu):.2f}")
PY
