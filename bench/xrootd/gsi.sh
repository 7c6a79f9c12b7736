#!/usr/bin/env bash
# gsi on root://: Kaon against Debian's xrootd (sec.protocol gsi), same
# machine, same credential, same client, one run, alternating rounds.
#
#   bench/xrootd/gsi.sh                       # 5 rounds of 200 logins, 4 clients; 256 MiB data rows
#   LOGINS=300 CLIENTS=2 ROUNDS=3 SIZE_MB=512 bench/xrootd/gsi.sh
#   KAON_BIN=/path/to/kaon bench/xrootd/gsi.sh
#
# Logins: CLIENTS Python XRootD processes (/usr/bin/python3, Debian's bindings) each open LOGINS/CLIENTS new
# sessions (a new user name per session: XrdCl opens a new connection,
# logs in and runs the whole gsi handshake) and stat "/" once per session;
# logins per second of each server, and Kaon/xrootd (goal >= 1.0).
# Data: a Python XRootD session, authenticated with gsi or with unix
# (XrdSecPROTOCOL), writes then reads SIZE_MB at Kaon in 8 MiB requests,
# timed after the login; gsi/unix (goal >= 0.95: after the handshake a
# gsi session's requests cost what a unix session's do).
# Credentials are made here with openssl (a CA, a user certificate) and
# xrdgsiproxy (an RFC 3820 proxy); both servers use the RSA host
# certificate Kaon's local CA issues for gsi.
set -euo pipefail

LOGINS=${LOGINS:-200}
CLIENTS=${CLIENTS:-4}
ROUNDS=${ROUNDS:-5}
SIZE_MB=${SIZE_MB:-256}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-gsi-bench.XXXXXX")
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
for c in xrootd xrdcp xrdgsiproxy openssl python3; do command -v $c >/dev/null || { echo "$c not installed (scripts/deps.sh)" >&2; exit 1; }; done

# --- credentials: a grid CA, Alice's certificate, her proxy ---
C=$WORK/creds
mkdir -p "$C/certificates"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$C/ca.key" -out "$C/ca.pem" -days 2 \
	-subj "/DC=org/DC=kaon-bench/CN=Bench CA" -addext "basicConstraints=critical,CA:true" \
	-addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
cp "$C/ca.pem" "$C/certificates/$(openssl x509 -in "$C/ca.pem" -noout -hash).0"
openssl req -newkey rsa:2048 -nodes -keyout "$C/userkey.pem" -out "$C/user.csr" -subj "/DC=org/DC=kaon-bench/CN=Alice" 2>/dev/null
printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$C/user.ext"
openssl x509 -req -in "$C/user.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -days 2 -extfile "$C/user.ext" \
	-out "$C/usercert.pem" 2>/dev/null
chmod 400 "$C/userkey.pem"
echo '"/DC=org/DC=kaon-bench/CN=Alice" daemon' >"$C/grid-mapfile"

# --- Kaon: gsi, and unix for the data rows ---
cd "$REPO"
if [ -n "${KAON_BIN:-}" ]; then cp "$KAON_BIN" "$WORK/kaon-bin"; else go build -o "$WORK/kaon-bin" ./cmd/kaon; fi
mkdir -p "$WORK/kaon"
"$WORK/kaon-bin" up --data "$WORK/kaon" --http 127.0.0.1:0 --xrootd 127.0.0.1:0 --tls --auth gsi,unix \
	--tls-ca-dir "$C/certificates" --grid-mapfile "$C/grid-mapfile" >"$WORK/kaon/out" 2>"$WORK/kaon/log" &
PIDS+=($!)
for _ in $(seq 300); do [ -s "$WORK/kaon/endpoints.json" ] && break; sleep 0.1; done
[ -s "$WORK/kaon/endpoints.json" ] || { cat "$WORK/kaon/log" >&2; exit 1; }
KPORT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["xrootd"].rsplit(":",1)[1])' "$WORK/kaon/endpoints.json")
# Kaon's local CA signed the host certificates both servers present.
KCA=$WORK/kaon/tls/ca.pem
cp "$KCA" "$C/certificates/$(openssl x509 -in "$KCA" -noout -hash).0"
export X509_CERT_DIR=$C/certificates
xrdgsiproxy init -cert "$C/usercert.pem" -key "$C/userkey.pem" -certdir "$C/certificates" -valid 2:00 -out "$C/proxy" >/dev/null 2>&1
export X509_USER_PROXY=$C/proxy

# --- Debian's xrootd, gsi only, the same host certificate ---
XPORT=$(free_port)
X=$WORK/xrootd
mkdir -p "$X/data" "$X/run" "$X/tls"
cp "$WORK/kaon/tls/gsicert.pem" "$X/tls/hostcert.pem"
cp "$WORK/kaon/tls/gsikey.pem" "$X/tls/hostkey.pem"
cp "$C/grid-mapfile" "$X/grid-mapfile"
cat >"$X/xrd.cfg" <<EOF
xrd.port $XPORT
all.export /
oss.localroot $X/data
all.adminpath $X/run
all.pidpath $X/run
xrootd.seclib libXrdSec.so
sec.protocol gsi -certdir:$C/certificates -cert:$X/tls/hostcert.pem -key:$X/tls/hostkey.pem -gridmap:$X/grid-mapfile -gmapopt:2 -crl:0 -ca:1
sec.protbind * only gsi
EOF
chown -R xrootd: "$X"
chmod 400 "$X/tls/hostkey.pem"
chmod 755 "$WORK" "$C" "$C/certificates"
xrootd -R xrootd -c "$X/xrd.cfg" -l "$X/log" -n gbench >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do xrdfs "localhost:$XPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
xrdfs "localhost:$XPORT" stat / >/dev/null || { echo "xrootd with gsi does not answer:" >&2; tail -30 "$X/gbench/log" >&2; exit 1; }
xrdfs "localhost:$KPORT" stat / >/dev/null || { echo "kaon with gsi does not answer:" >&2; tail -30 "$WORK/kaon/log" >&2; exit 1; }
# /bench belongs to daemon, whom the proxy maps to.
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
		/usr/bin/python3 "$WORK/logins.py" "$port" "$SEQ" "$per" & pids+=($!)
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
	if [ $((r % 2)) = 1 ]; then data unix; data gsi; else data gsi; data unix; fi
	echo "round $r: logins/s xrootd ${RES[xrootd]}| kaon ${RES[kaon]}; MB/s up unix ${RES[up.unix]}| gsi ${RES[up.gsi]}; down unix ${RES[down.unix]}| gsi ${RES[down.gsi]}   load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo
printf "%-34s %10s %10s %10s %14s\n" "median" "xrootd" "kaon" "kaon/xrd" "paired ratio"
printf "%-34s %10s %10s %10s %14s\n" "gsi logins/s ($CLIENTS clients)" "$(median ${RES[xrootd]})" "$(median ${RES[kaon]})" \
	"$(python3 -c "print('%.2f' % ($(median ${RES[kaon]})/$(median ${RES[xrootd]})))")" "$(pratio "${RES[kaon]}" "${RES[xrootd]}")"
printf "%-34s %10s %10s %10s %14s\n" "kaon session MB/s (8 MiB requests)" "unix" "gsi" "gsi/unix" "paired ratio"
for k in up down; do
	[ $k = up ] && label="write" || label="read"
	printf "%-34s %10s %10s %10s %14s\n" "$label" "$(median ${RES[$k.unix]})" "$(median ${RES[$k.gsi]})" \
		"$(python3 -c "print('%.2f' % ($(median ${RES[$k.gsi]})/$(median ${RES[$k.unix]})))")" "$(pratio "${RES[$k.gsi]}" "${RES[$k.unix]}")"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
