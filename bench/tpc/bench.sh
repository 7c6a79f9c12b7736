#!/usr/bin/env bash
# Third-party copy throughput: two Kaon instances against two Debian xrootd
# instances, on the same disk and loopback, in one run.
#
#   bench/tpc/bench.sh                 # 1 GiB and 8 x 256 MiB, 3 rounds
#   ROUNDS=5 BIG_MB=2048 bench/tpc/bench.sh
#   PPROF=1 bench/tpc/bench.sh         # Kaon with --pprof (addresses printed)
#   KINDS="pull push" bench/tpc/bench.sh   # only these rows (x pull push)
#   KEEP=1 bench/tpc/bench.sh          # keep the work directory (logs)
#
# A measurement in which a copy fails is taken again (RETRIES, default 2)
# and counted in the "failed k/x" column (Kaon/xrootd).
#
# Rows, each measured on both systems:
#   XRootD TPC      xrdcp --tpc only root://src root://dst
#   HTTP-TPC pull   curl -X COPY -H 'Source: https://src/f' https://dst/f
#   HTTP-TPC push   curl -X COPY -H 'Destination: https://dst/f' https://src/f
# and, Kaon only (the row kept from before TLS): HTTP-TPC pull over http.
#
# TLS: Debian's xrootd loads its HTTP-TPC handler only with TLS, so HTTP-TPC
# runs over https on both. The first Kaon instance runs `kaon up --tls`
# and generates a local CA and a host certificate (naming 127.0.0.1); the
# second uses the same directory (--tls-dir), so both trust one CA. Each
# xrootd gets a copy of that host certificate and key (owned by the xrootd
# user; it runs with -R xrootd) and of the CA in hashed layout:
#   xrd.tls <hostcert> <hostkey>
#   xrd.tlsca certdir <dir>              # also the CAs its libcurl trusts
#   xrd.protocol XrdHttp:<port> libXrdHttp.so   # https on its own port
#   http.exthandler xrdtpc libXrdHttpTPC.so     # COPY pull and push
# Nothing else is needed for an unauthenticated COPY: there is no
# xrootd.seclib / sec.protocol, ofs.authorize or acc.authdb, so the
# anonymous https client may read and write everything exported (as it
# may over root://). Kaon instances on one host need --tpc-allow-loopback.
# Both sides pull or push with one stream (xrootd: no X-Number-Of-Streams).
#
# Kaon runs with its defaults (--sync: data fsynced before commit, adler32
# and crc32c computed while writing, the copy verified end to end); xrootd
# with ofs.tpc and adler32 checksums on request (none computed while
# writing, no fsync). `sync` runs (untimed) before every measurement, so
# no copy pays for the write-back of the one before.
#
# Timing granularity: xrdcp --tpc polls the destination every 2.5 s and
# returns only at a poll, so XRootD TPC times are rounded up to the next
# 2.5 s step for both systems alike. curl -X COPY has no such step: both
# servers send a performance marker at once and then every 5 s (Kaon:
# --tpc-markers, xrootd: fixed), but write the final "success:" line and
# end the response as soon as the copy finishes (xrootd's libcurl loop
# wakes on socket activity, not on the marker period), so HTTP-TPC times
# are the copies' own.
#
# Each row alternates which system goes first per round; "paired" is the
# median of the per-round kaon/xrootd ratios.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
BIG_MB=${BIG_MB:-1024}
SMALL_MB=${SMALL_MB:-256}
PAR=${PAR:-8}
RETRIES=${RETRIES:-2}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-tpc-bench.XXXXXX")
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ -n "${KEEP:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
mbps() { python3 -c "print('%.1f' % ($1/($3-$2)))"; }
median() { python3 -c "import sys,statistics; print('%.1f' % statistics.median([float(x) for x in sys.argv[1:]]))" "$@"; }
ratio() { python3 -c "import sys; print('%.2f' % ($1/$2))"; }
pratio() { python3 -c "import sys,statistics; k=[float(x) for x in sys.argv[1].split()]; x=[float(x) for x in sys.argv[2].split()]; print('%.2f' % statistics.median([a/b for a,b in zip(k,x)]))" "$1" "$2"; }
endpoint() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

command -v xrootd >/dev/null || { echo "xrootd (xrootd-server) not installed" >&2; exit 1; }
chmod 755 "$WORK"

# --- two Kaon instances sharing one local CA ---
(cd "$REPO" && go build -o "$WORK/kaon" ./cmd/kaon)
KX=() KH=() KS=()
for n in 1 2; do
	d="$WORK/kaon$n"
	mkdir -p "$d"
	extra=()
	[ "$n" = 2 ] && extra+=(--tls-dir "$WORK/kaon1/tls")
	[ -n "${PPROF:-}" ] && extra+=(--pprof "127.0.0.1:$(free_port)")
	"$WORK/kaon" up --data "$d" --http 127.0.0.1:0 --xrootd 127.0.0.1:0 --tpc-allow-loopback --tls "${extra[@]}" >"$d/out" 2>"$d/log" &
	PIDS+=($!)
	for _ in $(seq 300); do [ -s "$d/endpoints.json" ] && break; sleep 0.1; done
	[ -s "$d/endpoints.json" ] || { echo "kaon $n did not start:" >&2; tail -n 20 "$d/log" >&2; exit 1; }
	KX+=("$(endpoint "$d/endpoints.json" xrootd)")
	KH+=("$(endpoint "$d/endpoints.json" http)")
	KS+=("$(endpoint "$d/endpoints.json" https)")
	[ -n "${PPROF:-}" ] && echo "kaon $n pprof: ${extra[-1]}"
done
CA="$WORK/kaon1/tls/ca.pem"

# --- two Debian xrootd servers with XRootD TPC and HTTP-TPC over https ---
XR=() XS=()
for n in 1 2; do
	port=$(free_port) hport=$(free_port)
	d="$WORK/xrootd$n"
	mkdir -p "$d/data" "$d/run" "$d/tls" "$d/log"
	cp "$WORK/kaon1/tls/hostcert.pem" "$WORK/kaon1/tls/hostkey.pem" "$d/tls/"
	cp -r "$WORK/kaon1/tls/certificates" "$d/tls/certs"
	cat >"$d/xrd.cfg" <<EOF
xrd.port $port
all.export /
oss.localroot $d/data
all.adminpath $d/run
all.pidpath $d/run
xrootd.chksum adler32
ofs.tpc pgm /usr/bin/xrdcp --server
xrd.tls $d/tls/hostcert.pem $d/tls/hostkey.pem
xrd.tlsca certdir $d/tls/certs
xrd.protocol XrdHttp:$hport libXrdHttp.so
http.exthandler xrdtpc libXrdHttpTPC.so
EOF
	chown -R xrootd: "$d"
	xrootd -R xrootd -c "$d/xrd.cfg" -l "$d/log/xrootd.log" -n "tpcb$n" >/dev/null 2>&1 &
	PIDS+=($!)
	XR+=("127.0.0.1:$port")
	XS+=("https://127.0.0.1:$hport")
	for _ in $(seq 100); do curl -s -o /dev/null --cacert "$CA" "https://127.0.0.1:$hport/" && break; sleep 0.1; done
	curl -sS -o /dev/null --cacert "$CA" "https://127.0.0.1:$hport/" || { echo "xrootd $n serves no https:" >&2; tail -n 20 "$d"/log/tpcb$n/xrootd.log >&2; exit 1; }
done

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
# adler32 of the sources: every copy is checked against them.
declare -A SUM
for n in big small; do
	i=$n; [ $n = small ] && i=small1
	SUM[$n]=$(xrdfs "${XR[0]}" query checksum "/$i" | cut -d' ' -f2)
	k=$(xrdfs "${KX[0]#root://}" query checksum "/src/$i" | cut -d' ' -f2)
	[ "$k" = "${SUM[$n]}" ] || { echo "source checksums differ for $i: kaon $k, xrootd ${SUM[$n]}" >&2; exit 1; }
done
echo "kaon: ${KX[*]} ${KS[*]}   xrootd: ${XR[*]} ${XS[*]}   big ${BIG_MB} MiB, ${PAR} x ${SMALL_MB} MiB, ${ROUNDS} rounds"
echo "load at start: $(load)"

declare -A RES FAILS
# Copy functions: NAME [i]; big with no i, the i-th small file otherwise.
xrd_tpc() { xrdcp -s -f --tpc only "$1" "$2"; }
# copy HEADER REMOTE TARGET: an HTTP-TPC COPY; fails unless the last line
# of the answer is "success: ...".
copy() {
	local out
	out=$(curl -sS -f -L --cacert "$CA" -X COPY -H "$1: $2" "$3" 2>&1) || { echo "COPY $3 ($1: $2) failed: $out" >&2; return 1; }
	[[ $(tail -n1 <<<"$out") == success* ]] || { echo "COPY $3 ($1: $2): $(tail -n1 <<<"$out")" >&2; return 1; }
}
f() { [ -n "${1:-}" ] && echo "small$1" || echo big; }
kaon.x() { xrd_tpc "${KX[0]}//src/$(f "${1:-}")" "${KX[1]}//dst/$(f "${1:-}")"; }
xrootd.x() { xrd_tpc "root://${XR[0]}//$(f "${1:-}")" "root://${XR[1]}//$(f "${1:-}")"; }
kaon.pull() { copy Source "${KS[0]}/src/$(f "${1:-}")" "${KS[1]}/pull/$(f "${1:-}")"; }
xrootd.pull() { copy Source "${XS[0]}/$(f "${1:-}")" "${XS[1]}/pull$(f "${1:-}")"; }
kaon.push() { copy Destination "${KS[1]}/push/$(f "${1:-}")" "${KS[0]}/src/$(f "${1:-}")"; }
xrootd.push() { copy Destination "${XS[1]}/push$(f "${1:-}")" "${XS[0]}/$(f "${1:-}")"; }
kaon.http() { copy Source "${KH[0]}/src/$(f "${1:-}")" "${KH[1]}/hdst/$(f "${1:-}")"; }

# Destination paths per kind: SYSTEM.KIND -> "host prefix". Every copy
# creates its file (removed before, untimed), is checked against its
# source's adler32 and removed after (untimed: the disk holds the sources
# and one measurement's copies at a time).
declare -A DST=(
	[kaon.x]="${KX[1]#root://} /dst/" [xrootd.x]="${XR[1]} /"
	[kaon.pull]="${KX[1]#root://} /pull/" [xrootd.pull]="${XR[1]} /pull"
	[kaon.push]="${KX[1]#root://} /push/" [xrootd.push]="${XR[1]} /push"
	[kaon.http]="${KX[1]#root://} /hdst/"
)
prepare() { # SYSTEM.KIND names...
	local hp p n
	read -r hp p <<<"${DST[$1]}"
	shift
	for n in "$@"; do xrdfs "$hp" rm "$p$n" >/dev/null 2>&1 || true; done
	sync
}
verify() { # SYSTEM.KIND names...
	local hp p n got
	read -r hp p <<<"${DST[$1]}"
	shift
	for n in "$@"; do
		got=$(xrdfs "$hp" query checksum "$p$n" | cut -d' ' -f2)
		[ "$got" = "${SUM[${n%%[0-9]*}]}" ] || { echo "checksum mismatch at $hp $p$n: $got != ${SUM[${n%%[0-9]*}]}" >&2; exit 1; }
		xrdfs "$hp" rm "$p$n" >/dev/null
	done
}
# run SYSTEM.KIND big|small: one timed measurement, appended to RES. A
# measurement in which a copy fails is counted in FAILS (a table column),
# reported with the servers' last log lines, and taken again, at most
# RETRIES times.
run() {
	local key=$1 size=$2 t0 t1 mb jobs j i fail attempt names=big
	[ "$size" = small ] && names=$(for i in $(seq $PAR); do echo "small$i"; done)
	for attempt in $(seq 0 "$RETRIES"); do
		fail=0 jobs=()
		prepare "$key" $names
		if [ "$size" = big ]; then
			t0=$(now); "$key" || fail=1; t1=$(now)
			mb=$BIG_MB
		else
			t0=$(now)
			for i in $(seq $PAR); do "$key" "$i" & jobs+=($!); done
			for j in "${jobs[@]}"; do wait "$j" || fail=1; done
			t1=$(now)
			mb=$((PAR * SMALL_MB))
		fi
		if [ "$fail" = 0 ]; then
			RES[$key.$size]+="$(mbps "$mb" "$t0" "$t1") "
			verify "$key" $names
			return
		fi
		FAILS[$key.$size]=$((${FAILS[$key.$size]:-0} + 1))
		echo "$key $size: attempt $((attempt + 1)) failed (load $(load)); servers' last log lines:" >&2
		tail -n 5 "$WORK"/xrootd?/log/*/xrootd.log "$WORK"/kaon?/log >&2
	done
	echo "$key $size failed $((RETRIES + 1)) times" >&2
	exit 1
}

KINDS=${KINDS:-x pull push}
for r in $(seq "$ROUNDS"); do
	for k in $KINDS; do
		for s in big small; do
			if [ $((r % 2)) = 1 ]; then run kaon.$k $s; run xrootd.$k $s; else run xrootd.$k $s; run kaon.$k $s; fi
		done
	done
	run kaon.http big
	run kaon.http small
	echo "round $r (load $(load)):"
	for k in $KINDS; do
		echo "  $k big: kaon ${RES[kaon.$k.big]}| xrootd ${RES[xrootd.$k.big]}; ${PAR}x: kaon ${RES[kaon.$k.small]}| xrootd ${RES[xrootd.$k.small]}"
	done
	echo "  http pull (kaon only) big: ${RES[kaon.http.big]}; ${PAR}x: ${RES[kaon.http.small]}"
done

echo "every copy verified (adler32); load at end: $(load)"

printf "\n%-34s %10s %10s %10s %10s %10s\n" "median MB/s" "kaon" "xrootd" "kaon/xrd" "paired" "failed k/x"
for k in $KINDS; do
	case $k in x) label="XRootD TPC" ;; pull) label="HTTP-TPC https pull" ;; push) label="HTTP-TPC https push" ;; esac
	for s in big small; do
		l="$label ${BIG_MB} MiB"
		[ $s = small ] && l="$label ${PAR} x ${SMALL_MB} MiB"
		K=$(median ${RES[kaon.$k.$s]}) X=$(median ${RES[xrootd.$k.$s]})
		printf "%-34s %10s %10s %10s %10s %10s\n" "$l" "$K" "$X" "$(ratio "$K" "$X")" "$(pratio "${RES[kaon.$k.$s]}" "${RES[xrootd.$k.$s]}")" "${FAILS[kaon.$k.$s]:-0}/${FAILS[xrootd.$k.$s]:-0}"
	done
done
printf "%-34s %10s %10s %10s %10s %10s\n" "HTTP-TPC http pull ${BIG_MB} MiB" "$(median ${RES[kaon.http.big]})" "n/a" "-" "-" "${FAILS[kaon.http.big]:-0}/-"
printf "%-34s %10s %10s %10s %10s %10s\n" "HTTP-TPC http pull ${PAR} x ${SMALL_MB} MiB" "$(median ${RES[kaon.http.small]})" "n/a" "-" "-" "${FAILS[kaon.http.small]:-0}/-"
