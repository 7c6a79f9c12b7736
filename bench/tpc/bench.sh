#!/usr/bin/env bash
# Third-party copy throughput: two Kaon instances against two Debian xrootd
# instances, on the same disk and loopback, in one run.
#
#   bench/tpc/bench.sh                 # 1 GiB and 8 x 256 MiB, 3 rounds
#   ROUNDS=5 BIG_MB=2048 bench/tpc/bench.sh
#
# XRootD TPC (xrdcp --tpc only) runs on both systems. HTTP-TPC (curl -X
# COPY, pull) runs Kaon -> Kaon; Debian's xrootd loads its HTTP-TPC handler
# only with TLS, so its HTTP-TPC row is not measured here.
#
# Kaon runs with its defaults (--sync: data fsynced before commit, adler32
# and crc32c computed while writing); xrootd with ofs.tpc and adler32
# checksums on request (none computed while writing, no fsync).
#
# Note: xrdcp --tpc polls the destination every 2.5 s and returns only at
# a poll, so XRootD TPC times are rounded up to the next 2.5 s step for
# both systems alike.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
BIG_MB=${BIG_MB:-1024}
SMALL_MB=${SMALL_MB:-256}
PAR=${PAR:-8}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-tpc-bench.XXXXXX")
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
mbps() { python3 -c "print('%.1f' % ($1/($3-$2)))"; }
median() { python3 -c "import sys,statistics; print('%.1f' % statistics.median([float(x) for x in sys.argv[1:]]))" "$@"; }
ratio() { python3 -c "import sys; print('%.2f' % ($1/$2))"; }

command -v xrootd >/dev/null || { echo "xrootd (xrootd-server) not installed" >&2; exit 1; }
chmod 755 "$WORK"

# --- two Debian xrootd servers with TPC ---
XR=()
for n in 1 2; do
	port=$(free_port)
	d="$WORK/xrootd$n"
	mkdir -p "$d/data" "$d/run" "$d/log"
	cat >"$d/xrd.cfg" <<EOF
xrd.port $port
all.export /
oss.localroot $d/data
all.adminpath $d/run
all.pidpath $d/run
xrootd.chksum adler32
ofs.tpc pgm /usr/bin/xrdcp --server
EOF
	chown -R xrootd: "$d"
	xrootd -R xrootd -c "$d/xrd.cfg" -l "$d/log/xrootd.log" -n "tpcb$n" >/dev/null 2>&1 &
	PIDS+=($!)
	XR+=("127.0.0.1:$port")
done

# --- two Kaon instances ---
(cd "$REPO" && go build -o "$WORK/kaon" ./cmd/kaon)
KX=() KH=()
for n in 1 2; do
	d="$WORK/kaon$n"
	mkdir -p "$d"
	"$WORK/kaon" up --data "$d" --http 127.0.0.1:0 --xrootd 127.0.0.1:0 --tpc-allow-loopback >"$d/out" 2>"$d/log" &
	PIDS+=($!)
	for _ in $(seq 300); do [ -s "$d/endpoints.json" ] && break; sleep 0.1; done
	KX+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["xrootd"])' "$d/endpoints.json")")
	KH+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$d/endpoints.json")")
done
sleep 1

# --- source files ---
head -c $((BIG_MB << 20)) /dev/urandom >"$WORK/big"
head -c $((SMALL_MB << 20)) /dev/urandom >"$WORK/small"
xrdcp -s -f "$WORK/big" "root://${XR[0]}//big"
xrdcp -s -f "$WORK/big" "${KX[0]}//src/big"
for i in $(seq $PAR); do
	xrdcp -s -f "$WORK/small" "root://${XR[0]}//small$i"
	xrdcp -s -f "$WORK/small" "${KX[0]}//src/small$i"
done
rm -f "$WORK/big" "$WORK/small"
echo "kaon: ${KX[*]} ${KH[*]}   xrootd: ${XR[*]}   big ${BIG_MB} MiB, ${PAR} x ${SMALL_MB} MiB, ${ROUNDS} rounds"

declare -A RES
xrd_tpc() { # name src dst...
	xrdcp -s -f --tpc only "$1" "$2"
}
one() { # key cmd...
	local key=$1 mb=$2; shift 2
	local t0 t1
	t0=$(now); "$@"; t1=$(now)
	RES[$key]+="$(mbps "$mb" "$t0" "$t1") "
}
par() { # key mb fn
	local key=$1 mb=$2 fn=$3 t0 t1 jobs=() j
	t0=$(now)
	for i in $(seq $PAR); do $fn "$i" & jobs+=($!); done
	for j in "${jobs[@]}"; do wait "$j"; done
	t1=$(now)
	RES[$key]+="$(mbps "$mb" "$t0" "$t1") "
}
k_xsmall() { xrd_tpc "${KX[0]}//src/small$1" "${KX[1]}//dst/small$1"; }
x_xsmall() { xrd_tpc "root://${XR[0]}//small$1" "root://${XR[1]}//small$1"; }
k_hsmall() { curl -sS -f -L -X COPY -H "Source: ${KH[0]}/src/small$1" "${KH[1]}/hdst/small$1" | tail -1 | grep -q '^success'; }

for r in $(seq "$ROUNDS"); do
	one kaon.xbig "$BIG_MB" xrd_tpc "${KX[0]}//src/big" "${KX[1]}//dst/big"
	one xrootd.xbig "$BIG_MB" xrd_tpc "root://${XR[0]}//big" "root://${XR[1]}//big"
	par kaon.xsmall $((PAR * SMALL_MB)) k_xsmall
	par xrootd.xsmall $((PAR * SMALL_MB)) x_xsmall
	one kaon.hbig "$BIG_MB" bash -c "curl -sS -f -L -X COPY -H 'Source: ${KH[0]}/src/big' '${KH[1]}/hdst/big' | tail -1 | grep -q '^success'"
	par kaon.hsmall $((PAR * SMALL_MB)) k_hsmall
	echo "round $r: xroot-tpc big kaon ${RES[kaon.xbig]}| xrootd ${RES[xrootd.xbig]}; ${PAR}x kaon ${RES[kaon.xsmall]}| xrootd ${RES[xrootd.xsmall]}; http-tpc big kaon ${RES[kaon.hbig]}; ${PAR}x kaon ${RES[kaon.hsmall]}"
done

# Every copy arrived whole: compare adler32 of one file per kind.
src=$(xrdfs "${XR[0]}" query checksum /big | cut -d' ' -f2)
for hp_p in "${KX[1]#root://} /dst/big" "${KX[1]#root://} /hdst/big" "${XR[1]} /big"; do
	read -r hp p <<<"$hp_p"
	got=$(xrdfs "$hp" query checksum "$p" | cut -d' ' -f2)
	[ "$got" = "$src" ] || { echo "checksum mismatch at $hp$p: $got != $src" >&2; exit 1; }
done

printf "\n%-34s %10s %10s %10s\n" "median MB/s" "kaon" "xrootd" "kaon/xrd"
for k in xbig xsmall; do
	label="XRootD TPC ${BIG_MB} MiB"; [ $k = xsmall ] && label="XRootD TPC ${PAR} x ${SMALL_MB} MiB"
	K=$(median ${RES[kaon.$k]}); X=$(median ${RES[xrootd.$k]})
	printf "%-34s %10s %10s %10s\n" "$label" "$K" "$X" "$(ratio "$K" "$X")"
done
printf "%-34s %10s %10s %10s\n" "HTTP-TPC ${BIG_MB} MiB (pull)" "$(median ${RES[kaon.hbig]})" "n/a" "-"
printf "%-34s %10s %10s %10s\n" "HTTP-TPC ${PAR} x ${SMALL_MB} MiB (pull)" "$(median ${RES[kaon.hsmall]})" "n/a" "-"
