#!/usr/bin/env bash
# Updates in place over root:// with the Python XRootD client, Kaon vs
# Debian's xrootd on the same disk and loopback, side by side in one run
# (rounds alternate which server goes first):
#   - random: WRITES writes of 4 KiB at random offsets into a SIZE_MB file
#     (replica:2 on Kaon: two filesystems of one `kaon up`), one
#     kXR_open_updt session, kXR_sync, close;
#   - append: APPENDS appends of 1 MiB to it, one kXR_open_apnd session,
#     kXR_sync, close.
# The time of a round covers open to the acknowledged close (for Kaon the
# commit of the update on both replicas). Prints per-round rates, the
# medians and the Kaon/xrootd ratio (>1: Kaon is faster), and the median
# of the per-round ratios.
#
#   bench/update/bench.sh                      # 1 GiB, 2000 writes, 64 appends, 5 rounds
#   SIZE_MB=256 WRITES=1000 APPENDS=32 ROUNDS=3 bench/update/bench.sh
#   KAON_BIN=/path/to/kaon bench/update/bench.sh
#   LAYOUT=plain bench/update/bench.sh          # Kaon's layout (default replica:2)
set -euo pipefail

SIZE_MB=${SIZE_MB:-1024}
WRITES=${WRITES:-2000}
APPENDS=${APPENDS:-64}
ROUNDS=${ROUNDS:-5}
LAYOUT=${LAYOUT:-replica:2}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-update-bench.XXXXXX")
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { python3 -c "import sys,statistics; v=[float(x) for x in sys.argv[1:]]; print('%.1f' % statistics.median(v))" "$@"; }
ratio() { python3 -c "import sys; print('%.2f' % ($1/$2))"; }
pratio() { python3 -c "import sys,statistics; k=[float(x) for x in sys.argv[1].split()]; x=[float(x) for x in sys.argv[2].split()]; print('%.2f' % statistics.median([a/b for a,b in zip(k,x)]))" "$1" "$2"; }

command -v xrootd >/dev/null || { echo "xrootd (xrootd-server) not installed: scripts/deps.sh" >&2; exit 1; }
/usr/bin/python3 -c 'import XRootD' 2>/dev/null || { echo "python3-xrootd not installed: scripts/deps.sh" >&2; exit 1; }

# --- Kaon: one `kaon up` with two filesystems ---
cd "$REPO"
if [ -n "${KAON_BIN:-}" ]; then cp "$KAON_BIN" "$WORK/kaon-bin"; else go build -o "$WORK/kaon-bin" ./cmd/kaon; fi
mkdir -p "$WORK/kaon"
"$WORK/kaon-bin" up --data "$WORK/kaon" --http 127.0.0.1:0 --xrootd 127.0.0.1:0 --fs 2 >"$WORK/kaon/out" 2>"$WORK/kaon/log" &
PIDS+=($!)
for _ in $(seq 300); do [ -s "$WORK/kaon/endpoints.json" ] && break; sleep 0.1; done
KURL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["xrootd"])' "$WORK/kaon/endpoints.json")
KHTTP=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$WORK/kaon/endpoints.json")
kaon() { KAON_URL=$KHTTP "$WORK/kaon-bin" "$@"; }
kaon mkdir /bench
[ "$LAYOUT" = plain ] || kaon attr set /bench "sys.forced.layout=$LAYOUT"

# --- Debian's xrootd, exporting a directory on the same disk ---
XPORT=$(free_port)
mkdir -p "$WORK/xrootd/data" "$WORK/xrootd/run"
cat >"$WORK/xrootd/xrd.cfg" <<CFG
xrd.port $XPORT
all.export /
oss.localroot $WORK/xrootd/data
all.adminpath $WORK/xrootd/run
all.pidpath $WORK/xrootd/run
CFG
chown -R xrootd: "$WORK/xrootd" 2>/dev/null || true
chmod 755 "$WORK"
xrootd -R xrootd -c "$WORK/xrootd/xrd.cfg" -l "$WORK/xrootd/log" -n kbench >/dev/null 2>&1 &
PIDS+=($!)
XURL="root://127.0.0.1:$XPORT"
for _ in $(seq 100); do xrdfs "127.0.0.1:$XPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
xrdfs "127.0.0.1:$XPORT" mkdir -p /bench

SRC="$WORK/src.bin"
head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"
xrdcp -s -f "$SRC" "$XURL//bench/f"
xrdcp -s -f "$SRC" "$KURL//bench/f"
rm -f "$SRC"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)   nproc: $(nproc)"
echo "xrootd: $XURL   kaon: $KURL ($LAYOUT)   file: $SIZE_MB MiB   random: $WRITES x 4 KiB   append: $APPENDS x 1 MiB   rounds: $ROUNDS"

declare -A RES
# run NAME URL MODE N [SEED]: one session, appends its rate (ops/s for
# random writes, MB/s for appends) to RES[NAME.MODE].
run() {
	local out
	out=$(/usr/bin/python3 "$REPO/bench/update/driver.py" "$2" /bench/f "$3" "$4" "${5:-}") || { echo "$1 $3 failed: $out" >&2; tail -n 20 "$WORK/kaon/log" >&2; exit 1; }
	if [ "$3" = random ]; then
		RES[$1.$3]+="$(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print("%.1f" % (j["ops"]/j["secs"]))' "$out") "
	else
		RES[$1.$3]+="$(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print("%.1f" % (j["bytes"]/j["secs"]/1e6))' "$out") "
	fi
}
for r in $(seq "$ROUNDS"); do
	for mode in random append; do
		n=$WRITES; [ "$mode" = append ] && n=$APPENDS
		if [ $((r % 2)) = 1 ]; then run xrootd "$XURL" $mode "$n" "$r"; run kaon "$KURL" $mode "$n" "$r"
		else run kaon "$KURL" $mode "$n" "$r"; run xrootd "$XURL" $mode "$n" "$r"; fi
	done
	echo "round $r: random 4 KiB writes/s xrootd ${RES[xrootd.random]}| kaon ${RES[kaon.random]}; 1 MiB appends MB/s xrootd ${RES[xrootd.append]}| kaon ${RES[kaon.append]}"
done
# Both files must hold the same size (same appends).
xs=$(xrdfs "127.0.0.1:$XPORT" stat /bench/f | awk '/Size/ {print $2}')
ks=$(xrdfs "${KURL#root://}" stat /bench/f | awk '/Size/ {print $2}')
[ "$xs" = "$ks" ] || { echo "sizes differ after the rounds: xrootd $xs, kaon $ks" >&2; exit 1; }

echo
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-30s %12s %12s %10s %14s\n" "median" "xrootd" "kaon" "kaon/xrd" "paired ratio"
for mode in random append; do
	label="4 KiB random writes/s"; [ "$mode" = append ] && label="1 MiB appends, MB/s"
	x=$(median ${RES[xrootd.$mode]}); K=$(median ${RES[kaon.$mode]})
	printf "%-30s %12s %12s %10s %14s\n" "$label" "$x" "$K" "$(ratio "$K" "$x")" "$(pratio "${RES[kaon.$mode]}" "${RES[xrootd.$mode]}")"
done
