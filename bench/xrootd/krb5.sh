#!/usr/bin/env bash
# krb5 on root://: Kaon against Debian's xrootd (sec.protocol krb5), same
# machine, same ticket, same client, one run, alternating rounds.
#
#   bench/xrootd/krb5.sh                      # 5 rounds of 200 logins, 4 clients; 256 MiB data rows
#   LOGINS=300 CLIENTS=2 ROUNDS=3 SIZE_MB=512 bench/xrootd/krb5.sh
#   KAON_BIN=/path/to/kaon bench/xrootd/krb5.sh
#
# Logins: CLIENTS Python XRootD processes each open LOGINS/CLIENTS new
# sessions (a new user name per session: XrdCl opens a new connection,
# logs in and sends an AP-REQ made from the cached service ticket) and
# stat "/" once per session; logins per second of each server, and
# Kaon/xrootd (goal >= 1.0). Data: a Python XRootD session, authenticated
# with krb5 or with unix (XrdSecPROTOCOL), writes then reads SIZE_MB at
# Kaon in 8 MiB requests, timed after the login; krb5/unix (goal >= 0.95).
# A MIT KDC (krb5kdc -n) on loopback serves the bench's own realm; both
# servers verify with the same keytab (xrootd/localhost@KAON.BENCH), each
# with a replay cache of its own.
set -euo pipefail

LOGINS=${LOGINS:-200}
CLIENTS=${CLIENTS:-4}
ROUNDS=${ROUNDS:-5}
SIZE_MB=${SIZE_MB:-256}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-krb5-bench.XXXXXX")
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
median() { python3 -c "import sys,statistics; v=[float(x) for x in sys.argv[1:]]; print('%.1f' % statistics.median(v))" "$@"; }
pratio() { python3 -c "import sys,statistics; k=[float(x) for x in sys.argv[1].split()]; x=[float(x) for x in sys.argv[2].split()]; print('%.2f' % statistics.median([a/b for a,b in zip(k,x)]))" "$1" "$2"; }
for c in xrootd xrdfs krb5kdc kdb5_util kadmin.local kinit klist python3; do command -v $c >/dev/null || { echo "$c not installed (scripts/deps.sh)" >&2; exit 1; }; done

# --- the KDC: realm KAON.BENCH, the service's keytab, daemon's ticket ---
K=$WORK/kdc
mkdir -p "$K/rcache"
chmod 755 "$WORK" "$K"
KDCPORT=$(free_port)
cat >"$K/krb5.conf" <<CONF
[libdefaults]
	default_realm = KAON.BENCH
	dns_lookup_kdc = false
	dns_lookup_realm = false
	dns_canonicalize_hostname = false
	rdns = false
	udp_preference_limit = 1
[realms]
	KAON.BENCH = {
		kdc = 127.0.0.1:$KDCPORT
	}
[domain_realm]
	localhost = KAON.BENCH
CONF
cat >"$K/kdc.conf" <<CONF
[kdcdefaults]
	kdc_listen = 127.0.0.1:$KDCPORT
	kdc_tcp_listen = 127.0.0.1:$KDCPORT
[realms]
	KAON.BENCH = {
		database_name = $K/db
		key_stash_file = $K/stash
		acl_file = $K/kadm5.acl
	}
[logging]
	kdc = FILE:$K/kdc.log
CONF
chmod 644 "$K/krb5.conf"
touch "$K/kadm5.acl"
export KRB5_CONFIG=$K/krb5.conf KRB5_KDC_PROFILE=$K/kdc.conf KRB5RCACHEDIR=$K/rcache KRB5CCNAME=FILE:$K/cc
kdb5_util -r KAON.BENCH create -s -P bench-master >/dev/null
for p in xrootd/localhost daemon; do kadmin.local -q "addprinc -randkey $p" >/dev/null 2>&1; done
kadmin.local -q "ktadd -k $K/service.keytab xrootd/localhost" >/dev/null
kadmin.local -q "ktadd -k $K/daemon.keytab daemon" >/dev/null
krb5kdc -n >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do kinit -k -t "$K/daemon.keytab" daemon 2>/dev/null && break; sleep 0.1; done
klist -s || { echo "no ticket from the KDC:" >&2; cat "$K/kdc.log" >&2; exit 1; }

# --- Kaon: krb5, and unix for the data rows ---
cd "$REPO"
if [ -n "${KAON_BIN:-}" ]; then cp "$KAON_BIN" "$WORK/kaon-bin"; else go build -o "$WORK/kaon-bin" ./cmd/kaon; fi
mkdir -p "$WORK/kaon"
"$WORK/kaon-bin" up --data "$WORK/kaon" --http 127.0.0.1:0 --xrootd 127.0.0.1:0 --auth krb5,unix \
	--krb5-keytab "$K/service.keytab" >"$WORK/kaon/out" 2>"$WORK/kaon/log" &
PIDS+=($!)
for _ in $(seq 300); do [ -s "$WORK/kaon/endpoints.json" ] && break; sleep 0.1; done
[ -s "$WORK/kaon/endpoints.json" ] || { cat "$WORK/kaon/log" >&2; exit 1; }
KPORT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["xrootd"].rsplit(":",1)[1])' "$WORK/kaon/endpoints.json")

# --- Debian's xrootd, krb5 only, the same keytab ---
XPORT=$(free_port)
X=$WORK/xrootd
mkdir -p "$X/data" "$X/run" "$X/rcache"
cp "$K/service.keytab" "$X/krb5.keytab"
cat >"$X/xrd.cfg" <<CONF
xrd.port $XPORT
all.export /
oss.localroot $X/data
all.adminpath $X/run
all.pidpath $X/run
xrootd.seclib libXrdSec.so
sec.protocol krb5 $X/krb5.keytab xrootd/localhost@KAON.BENCH
sec.protbind * only krb5
CONF
chown -R xrootd: "$X"
chmod 400 "$X/krb5.keytab"
KRB5RCACHEDIR=$X/rcache xrootd -R xrootd -c "$X/xrd.cfg" -l "$X/log" -n kbench >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do xrdfs "localhost:$XPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
XrdSecPROTOCOL=krb5 xrdfs "localhost:$XPORT" stat / >/dev/null || { echo "xrootd with krb5 does not answer:" >&2; tail -30 "$X/kbench/log" >&2; exit 1; }
XrdSecPROTOCOL=krb5 xrdfs "localhost:$KPORT" stat / >/dev/null || { echo "kaon with krb5 does not answer:" >&2; tail -30 "$WORK/kaon/log" >&2; exit 1; }
# /bench belongs to daemon, whom the ticket maps to.
KAON_DATA="$WORK/kaon" "$WORK/kaon-bin" mkdir /bench
KAON_DATA="$WORK/kaon" "$WORK/kaon-bin" chown 1:1 /bench

cat >"$WORK/logins.py" <<'EOF'
import sys
from XRootD import client
port, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(first, first + n):
    fs = client.FileSystem("root://u%d@localhost:%s" % (i, port))
    st, _ = fs.stat("/")
    if not st.ok:
        sys.exit("login %d: %s" % (i, st.message))
EOF
SEQ=0
# logins NAME PORT: LOGINS new sessions over CLIENTS processes; logins/s.
declare -A RES
logins() {
	local name=$1 port=$2 per=$((LOGINS / CLIENTS)) t0 t1 j pids=()
	t0=$(now)
	for j in $(seq "$CLIENTS"); do
		XrdSecPROTOCOL=krb5 /usr/bin/python3 "$WORK/logins.py" "$port" "$SEQ" "$per" & pids+=($!)
		SEQ=$((SEQ + per))
	done
	for j in "${pids[@]}"; do wait "$j" || { echo "$name: a login failed" >&2; exit 1; }; done
	t1=$(now)
	RES[$name]+="$(python3 -c "print('%.1f' % ($per*$CLIENTS/($t1-$t0)))") "
}
cat >"$WORK/data.py" <<'EOF'
# One session (logged in before the clock starts), then SIZE_MB written
# and read back in 8 MiB requests: the session's data rate, MB/s.
import os, sys, time
from XRootD import client
from XRootD.client.flags import OpenFlags
url, size, name = sys.argv[1], int(sys.argv[2]) << 20, sys.argv[3]
fs = client.FileSystem(url)
st, _ = fs.stat("/bench")
assert st.ok, st.message
chunk = os.urandom(8 << 20)
f = client.File()
t0 = time.time()
st, _ = f.open(url + "//bench/" + name, OpenFlags.DELETE)
assert st.ok, st.message
for off in range(0, size, len(chunk)):
    st, _ = f.write(chunk, off)
    assert st.ok, st.message
st, _ = f.close()
assert st.ok, st.message
t1 = time.time()
f = client.File()
st, _ = f.open(url + "//bench/" + name, OpenFlags.READ)
assert st.ok, st.message
for off in range(0, size, len(chunk)):
    st, b = f.read(off, len(chunk))
    assert st.ok and b == chunk, st.message
f.close()
t2 = time.time()
print("%.1f %.1f" % (size / 1e6 / (t1 - t0), size / 1e6 / (t2 - t1)))
EOF
# data PROTO: a session authenticated with PROTO (XrdSecPROTOCOL) writes
# and reads SIZE_MB at Kaon.
data() {
	local p=$1 r
	r=$(XrdSecPROTOCOL=$p /usr/bin/python3 "$WORK/data.py" "root://localhost:$KPORT" "$SIZE_MB" "f.$p")
	RES[up.$p]+="${r% *} "
	RES[down.$p]+="${r#* } "
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)   logins: $LOGINS per round over $CLIENTS clients   rounds: $ROUNDS   data: $SIZE_MB MiB"
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then logins xrootd "$XPORT"; logins kaon "$KPORT"; else logins kaon "$KPORT"; logins xrootd "$XPORT"; fi
	if [ $((r % 2)) = 1 ]; then data unix; data krb5; else data krb5; data unix; fi
	echo "round $r: logins/s xrootd ${RES[xrootd]}| kaon ${RES[kaon]}; MB/s up unix ${RES[up.unix]}| krb5 ${RES[up.krb5]}; down unix ${RES[down.unix]}| krb5 ${RES[down.krb5]}   load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo
printf "%-34s %10s %10s %10s %14s\n" "median" "xrootd" "kaon" "kaon/xrd" "paired ratio"
printf "%-34s %10s %10s %10s %14s\n" "krb5 logins/s ($CLIENTS clients)" "$(median ${RES[xrootd]})" "$(median ${RES[kaon]})" \
	"$(python3 -c "print('%.2f' % ($(median ${RES[kaon]})/$(median ${RES[xrootd]})))")" "$(pratio "${RES[kaon]}" "${RES[xrootd]}")"
printf "%-34s %10s %10s %10s %14s\n" "kaon session MB/s (8 MiB requests)" "unix" "krb5" "krb5/unix" "paired ratio"
for k in up down; do
	[ $k = up ] && label="write" || label="read"
	printf "%-34s %10s %10s %10s %14s\n" "$label" "$(median ${RES[$k.unix]})" "$(median ${RES[$k.krb5]})" \
		"$(python3 -c "print('%.2f' % ($(median ${RES[$k.krb5]})/$(median ${RES[$k.unix]})))")" "$(pratio "${RES[$k.krb5]}" "${RES[$k.unix]}")"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
