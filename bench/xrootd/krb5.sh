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

METHOD=krb5
LOGIN_ENV=XrdSecPROTOCOL=krb5
. "$REPO/bench/xrootd/rounds.sh"
