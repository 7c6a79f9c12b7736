# The rounds gsi.sh and krb5.sh share, sourced by them: logins per second
# against Debian's xrootd and Kaon (alternating), then a session's data
# rate at Kaon with unix and with METHOD, and the medians and paired
# ratios. The caller sets METHOD (gsi or krb5), WORK, LOGINS, CLIENTS,
# ROUNDS, SIZE_MB, XPORT, KPORT, and defines now, median and pratio;
# LOGIN_ENV (e.g. XrdSecPROTOCOL=krb5) is put in the login clients'
# environment.
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
		env $LOGIN_ENV /usr/bin/python3 "$WORK/logins.py" "$port" "$SEQ" "$per" & pids+=($!)
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
	if [ $((r % 2)) = 1 ]; then data unix; data $METHOD; else data $METHOD; data unix; fi
	echo "round $r: logins/s xrootd ${RES[xrootd]}| kaon ${RES[kaon]}; MB/s up unix ${RES[up.unix]}| $METHOD ${RES[up.$METHOD]}; down unix ${RES[down.unix]}| $METHOD ${RES[down.$METHOD]}   load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo
printf "%-34s %10s %10s %10s %14s\n" "median" "xrootd" "kaon" "kaon/xrd" "paired ratio"
printf "%-34s %10s %10s %10s %14s\n" "$METHOD logins/s ($CLIENTS clients)" "$(median ${RES[xrootd]})" "$(median ${RES[kaon]})" \
	"$(python3 -c "print('%.2f' % ($(median ${RES[kaon]})/$(median ${RES[xrootd]})))")" "$(pratio "${RES[kaon]}" "${RES[xrootd]}")"
printf "%-34s %10s %10s %10s %14s\n" "kaon session MB/s (8 MiB requests)" "unix" "$METHOD" "$METHOD/unix" "paired ratio"
for k in up down; do
	[ $k = up ] && label="write" || label="read"
	printf "%-34s %10s %10s %10s %14s\n" "$label" "$(median ${RES[$k.unix]})" "$(median ${RES[$k.$METHOD]})" \
		"$(python3 -c "print('%.2f' % ($(median ${RES[$k.$METHOD]})/$(median ${RES[$k.unix]})))")" "$(pratio "${RES[$k.$METHOD]}" "${RES[$k.unix]}")"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
