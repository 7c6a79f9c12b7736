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

METHOD=gsi
LOGIN_ENV=
. "$REPO/bench/xrootd/rounds.sh"
