#!/usr/bin/env bash
# Compare xrdcp throughput against Kaon's root:// endpoint and Debian's real
# xrootd server, side by side on the same disk and loopback, in one run.
#
#   bench/xrootd/compare.sh            # 1 GiB file, 5 rounds, 8 parallel
#   SIZE_MB=256 ROUNDS=3 PAR=8 bench/xrootd/compare.sh
#   TARGET=fake bench/xrootd/compare.sh   # Kaon's protocol server over the
#                                         # xrdtest on-disk fake (no core)
#   KAON_BIN=/path/to/kaon bench/xrootd/compare.sh  # an already built binary
#   KAON_CHECKSUMS=adler32 bench/xrootd/compare.sh   # checksums Kaon computes
#                          while writing (default: the server's, adler32,
#                          crc32c, md5, sha256); xrootd computes none
#   TLS=0 bench/xrootd/compare.sh      # skip the TLS rows (default: on)
#   PAR_ROUNDS=0 bench/xrootd/compare.sh   # skip the parallel rows
#
# Prints per-run MB/s, the medians, and the Kaon/xrootd ratio (>1: Kaon is
# faster) for upload and download, single stream and PAR parallel xrdcp.
# With TLS (TARGET=kaon), both servers also serve TLS (Kaon: --tls, its
# generated CA; xrootd: xrd.tls/xrd.tlsca with the same host certificate):
# roots:// rows, each server's TLS cost (roots/root) and Kaon's TLS cost
# relative to xrootd's; and Kaon's HTTP PUT/GET with curl, https vs http.
set -euo pipefail

SIZE_MB=${SIZE_MB:-1024}
ROUNDS=${ROUNDS:-5}
PAR=${PAR:-8}
PAR_ROUNDS=${PAR_ROUNDS:-3}
TARGET=${TARGET:-kaon}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-xrd-bench.XXXXXX")
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
mbps() { python3 -c "import sys; print('%.1f' % ($1/($3-$2)))"; }
median() { python3 -c "import sys,statistics; v=[float(x) for x in sys.argv[1:]]; print('%.1f' % statistics.median(v))" "$@"; }
ratio() { python3 -c "import sys; print('%.2f' % ($1/$2))"; }
# pratio "K1 K2.." "X1 X2..": median of the per-round Kaon/xrootd ratios (the
# two runs of a round are back to back, so this cancels slow drifts of load).
pratio() { python3 -c "import sys,statistics; k=[float(x) for x in sys.argv[1].split()]; x=[float(x) for x in sys.argv[2].split()]; print('%.2f' % statistics.median([a/b for a,b in zip(k,x)]))" "$1" "$2"; }

command -v xrootd >/dev/null || { echo "xrootd (xrootd-server) not installed" >&2; exit 1; }
command -v xrdcp >/dev/null || { echo "xrdcp (xrootd-client) not installed" >&2; exit 1; }

TLS=${TLS:-1}
[ "$TARGET" = kaon ] || TLS=0
# --- Kaon ---
cd "$REPO"
if [ "$TARGET" = fake ]; then
	go build -o "$WORK/xrdfake" ./internal/xrootd/xrdtest/xrdfake
	mkdir -p "$WORK/kaon"
	"$WORK/xrdfake" "$WORK/kaon" >"$WORK/kaon/addr" 2>"$WORK/kaon/log" &
	PIDS+=($!); KPID=$!
	for _ in $(seq 100); do [ -s "$WORK/kaon/addr" ] && break; sleep 0.1; done
	KURL="root://$(cut -d' ' -f1 "$WORK/kaon/addr")"
else
	if [ -n "${KAON_BIN:-}" ]; then
		cp "$KAON_BIN" "$WORK/kaon-bin"
	else
		go build -o "$WORK/kaon-bin" ./cmd/kaon
	fi
	mkdir -p "$WORK/kaon"
	"$WORK/kaon-bin" up --data "$WORK/kaon" --http 127.0.0.1:0 --xrootd 127.0.0.1:0 $([ "$TLS" = 1 ] && echo --tls) >"$WORK/kaon/out" 2>"$WORK/kaon/log" &
	PIDS+=($!); KPID=$!
	for _ in $(seq 300); do [ -s "$WORK/kaon/endpoints.json" ] && break; sleep 0.1; done
	KURL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["xrootd"])' "$WORK/kaon/endpoints.json")
	KHTTP=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$WORK/kaon/endpoints.json")
fi
# --- Debian's xrootd, exporting a directory on the same disk ---
XPORT=$(free_port)
mkdir -p "$WORK/xrootd/data" "$WORK/xrootd/run"
cat >"$WORK/xrootd/xrd.cfg" <<EOF
xrd.port $XPORT
all.export /
oss.localroot $WORK/xrootd/data
all.adminpath $WORK/xrootd/run
all.pidpath $WORK/xrootd/run
xrootd.chksum adler32
EOF
if [ "$TLS" = 1 ]; then
	# The host certificate Kaon generated (it names 127.0.0.1), readable by
	# the xrootd user; its CA in the hashed layout.
	mkdir -p "$WORK/xrootd/tls"
	cp "$WORK/kaon/tls/hostcert.pem" "$WORK/kaon/tls/hostkey.pem" "$WORK/xrootd/tls/"
	cp -r "$WORK/kaon/tls/certificates" "$WORK/xrootd/tls/certs"
	cat >>"$WORK/xrootd/xrd.cfg" <<EOF
xrd.tls $WORK/xrootd/tls/hostcert.pem $WORK/xrootd/tls/hostkey.pem
xrd.tlsca certdir $WORK/xrootd/tls/certs
EOF
fi
chown -R xrootd: "$WORK/xrootd" 2>/dev/null || true
chmod 755 "$WORK"
xrootd -R xrootd -c "$WORK/xrootd/xrd.cfg" -l "$WORK/xrootd/log" -n kbench >/dev/null 2>&1 &
PIDS+=($!); XPID=$!

XURL="root://127.0.0.1:$XPORT"
for _ in $(seq 100); do xrdfs "127.0.0.1:$XPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
xrdfs "${XURL#root://}" mkdir -p /bench
xrdfs "${KURL#root://}" mkdir -p /bench
if [ "$TARGET" = kaon ] && [ -n "${KAON_CHECKSUMS:-}" ]; then
	KAON_DATA="$WORK/kaon" "$WORK/kaon-bin" attr set /bench "sys.forced.checksums=$KAON_CHECKSUMS"
fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)   TLS rows: $TLS"
echo "xrootd: $XURL   kaon($TARGET): $KURL   file: ${SIZE_MB} MiB   rounds: $ROUNDS   parallel: $PAR x ${PAR_ROUNDS} rounds   kaon checksums: ${KAON_CHECKSUMS:-server default}"

SRC="$WORK/src.bin"
head -c "$((SIZE_MB << 20))" /dev/urandom >"$SRC"
DOWN="$WORK/down"
mkdir -p "$DOWN"
declare -A RES

# one NAME URL: single-stream upload then download, appends MB/s results.
one() {
	local name=$1 url=$2 t0 t1
	t0=$(now); xrdcp -s -f "$SRC" "$url//bench/one.bin"; t1=$(now)
	RES[$name.up]+="$(mbps "$SIZE_MB" "$t0" "$t1") "
	t0=$(now); xrdcp -s -f "$url//bench/one.bin" "$DOWN/one.bin"; t1=$(now)
	RES[$name.down]+="$(mbps "$SIZE_MB" "$t0" "$t1") "
	cmp -s "$SRC" "$DOWN/one.bin" || { echo "$name: downloaded copy differs" >&2; exit 1; }
	rm -f "$DOWN/one.bin"
}

# par NAME URL: PAR concurrent uploads, then PAR concurrent downloads.
par() {
	local name=$1 url=$2 t0 t1 i
	t0=$(now)
	for i in $(seq "$PAR"); do xrdcp -s -f "$SRC" "$url//bench/p$i.bin" 2>"$WORK/err.$i" & done
	wait_jobs "$name" "upload to $url"
	t1=$(now)
	RES[$name.pup]+="$(mbps "$((SIZE_MB * PAR))" "$t0" "$t1") "
	t0=$(now)
	for i in $(seq "$PAR"); do xrdcp -s -f "$url//bench/p$i.bin" "$DOWN/p$i.bin" 2>"$WORK/err.$i" & done
	wait_jobs "$name" "download from $url"
	t1=$(now)
	RES[$name.pdown]+="$(mbps "$((SIZE_MB * PAR))" "$t0" "$t1") "
	rm -f "$DOWN"/p*.bin
}

# wait_jobs NAME WHAT waits for the xrdcp jobs of this shell (not the
# servers); when one fails it says which server, what the clients printed
# and the end of that server's log.
wait_jobs() {
	local j failed=0
	for j in $(jobs -p); do
		case " ${PIDS[*]} " in *" $j "*) ;; *) wait "$j" || failed=1 ;; esac
	done
	[ "$failed" = 0 ] && return
	local pid=$KPID log=$WORK/kaon/log
	case $1 in xrootd*) pid=$XPID log=$WORK/xrootd/kbench/log ;; esac
	echo "xrdcp failed: $1, parallel $2 (load $(cut -d' ' -f1-3 /proc/loadavg); server pid $pid $(kill -0 "$pid" 2>/dev/null && echo running || echo GONE))" >&2
	cat "$WORK"/err.* >&2
	tail -n 30 "$log" >&2
	exit 1
}

export X509_CERT_DIR="$WORK/kaon/tls/certificates"
SURL_X="roots://${XURL#root://}"
SURL_K="roots://${KURL#root://}"

# http SCHEME: curl PUT then GET of the file through Kaon (kaon.SCHEME.put/get).
http() {
	local scheme=$1 base t0 t1
	base="$scheme://${KHTTP#http://}"
	t0=$(now); curl -sSfL --cacert "$WORK/kaon/tls/ca.pem" -T "$SRC" "$base/bench/h.bin" -o /dev/null; t1=$(now)
	RES[kaon.$scheme.put]+="$(mbps "$SIZE_MB" "$t0" "$t1") "
	t0=$(now); curl -sSfL --cacert "$WORK/kaon/tls/ca.pem" "$base/bench/h.bin" -o "$DOWN/h.bin"; t1=$(now)
	RES[kaon.$scheme.get]+="$(mbps "$SIZE_MB" "$t0" "$t1") "
	cmp -s "$SRC" "$DOWN/h.bin" || { echo "$scheme: downloaded copy differs" >&2; exit 1; }
	rm -f "$DOWN/h.bin"
}

for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then one xrootd "$XURL"; one kaon "$KURL"; else one kaon "$KURL"; one xrootd "$XURL"; fi
	if [ "$TLS" = 1 ]; then
		if [ $((r % 2)) = 1 ]; then one xrootd.tls "$SURL_X"; one kaon.tls "$SURL_K"; else one kaon.tls "$SURL_K"; one xrootd.tls "$SURL_X"; fi
		if [ $((r % 2)) = 1 ]; then http http; http https; else http https; http http; fi
	fi
	echo "round $r: up xrootd ${RES[xrootd.up]}| kaon ${RES[kaon.up]}; down xrootd ${RES[xrootd.down]}| kaon ${RES[kaon.down]}"
	if [ "$TLS" = 1 ]; then
		echo "round $r roots://: up xrootd ${RES[xrootd.tls.up]}| kaon ${RES[kaon.tls.up]}; down xrootd ${RES[xrootd.tls.down]}| kaon ${RES[kaon.tls.down]}"
		echo "round $r curl: PUT http ${RES[kaon.http.put]}| https ${RES[kaon.https.put]}; GET http ${RES[kaon.http.get]}| https ${RES[kaon.https.get]}"
	fi
done
for r in $(seq "$PAR_ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then par xrootd "$XURL"; par kaon "$KURL"; else par kaon "$KURL"; par xrootd "$XURL"; fi
	echo "parallel round $r: up xrootd ${RES[xrootd.pup]}| kaon ${RES[kaon.pup]}; down xrootd ${RES[xrootd.pdown]}| kaon ${RES[kaon.pdown]}"
done

echo
printf "%-28s %12s %12s %10s %14s\n" "median MB/s" "xrootd" "kaon" "kaon/xrd" "paired ratio"
KEYS="up down"
[ "$PAR_ROUNDS" -gt 0 ] && KEYS="up down pup pdown"
for k in $KEYS; do
	case $k in up) label="upload, 1 stream" ;; down) label="download, 1 stream" ;;
		pup) label="upload, $PAR parallel" ;; pdown) label="download, $PAR parallel" ;; esac
	x=$(median ${RES[xrootd.$k]}); K=$(median ${RES[kaon.$k]})
	printf "%-28s %12s %12s %10s %14s\n" "$label" "$x" "$K" "$(ratio "$K" "$x")" "$(pratio "${RES[kaon.$k]}" "${RES[xrootd.$k]}")"
done

if [ "$TLS" = 1 ]; then
	echo
	printf "%-28s %12s %12s %10s %14s\n" "median MB/s, roots://" "xrootd" "kaon" "kaon/xrd" "paired ratio"
	for k in up down; do
		x=$(median ${RES[xrootd.tls.$k]}); K=$(median ${RES[kaon.tls.$k]})
		printf "%-28s %12s %12s %10s %14s\n" "$k, 1 stream, TLS" "$x" "$K" "$(ratio "$K" "$x")" "$(pratio "${RES[kaon.tls.$k]}" "${RES[xrootd.tls.$k]}")"
	done
	echo
	echo "throughput kept under TLS (median roots:// / median root://; 1 = TLS is free). Goal: kaon/xrd >= 1 (TLS costs kaon no more, relatively)."
	printf "%-28s %12s %12s %18s\n" "" "xrootd" "kaon" "kaon/xrd"
	for k in up down; do
		cx=$(ratio "$(median ${RES[xrootd.tls.$k]})" "$(median ${RES[xrootd.$k]})")
		ck=$(ratio "$(median ${RES[kaon.tls.$k]})" "$(median ${RES[kaon.$k]})")
		printf "%-28s %12s %12s %18s\n" "$k, 1 stream" "$cx" "$ck" "$(ratio "$ck" "$cx")"
	done
	echo
	printf "%-28s %12s %12s %10s\n" "kaon curl, median MB/s" "http" "https" "https/http"
	for k in put get; do
		h=$(median ${RES[kaon.http.$k]}); S=$(median ${RES[kaon.https.$k]})
		printf "%-28s %12s %12s %10s\n" "$k" "$h" "$S" "$(ratio "$S" "$h")"
	done
fi
