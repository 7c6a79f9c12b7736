#!/usr/bin/env bash
# kaon mount's direct path beside ceph-fuse, in one run: `dd` of DD_MB MiB
# (bs=1M) written (conv=fsync) and read back (after drop_caches) through
# `kaon mount` onto a Kaon filesystem inside the CephFS, and the same dd
# straight on the ceph-fuse mount of that CephFS. Rounds alternate which
# goes first; medians of ROUNDS, the ratio kaon/ceph-fuse (goal >= 0.95),
# the load average at the start and at the end, and how kaon mount read
# the file (kaon.datapath: passthrough, local or server).
#
#   sudo bench/mount/direct.sh [CLUSTER_DIR [KAON_BINARY]]
#   ROUNDS=3 DD_MB=2048 DIRECT=auto bench/mount/direct.sh
#   PEER=local bench/mount/direct.sh     # no Ceph: a local-directory posix
#                                        # filesystem vs dd on that directory
#   XRDCP=1                              # and xrdcp through the same Kaon
#                                        # servers (root://, from a file of
#                                        # zeros in CACHE, to /dev/null)
#   BLOCKSUMS=on                         # the Kaon filesystem keeps block sums:
#                                        # reads by the daemon, not passthrough
#   CACHE=DIR                            # kaon mount's journals (default /dev/shm)
#
# Without CLUSTER_DIR a cluster is made with scripts/ceph-dev.sh in a
# temporary directory and purged at the end. The Kaon filesystem is
# registered at a directory of the ceph-fuse mount (`kaon fs add --path`):
# the mount on this host reaches its stripes there itself. Root.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${ROUNDS:-3} DD_MB=${DD_MB:-2048} XRDCP=${XRDCP:-} DIRECT=${DIRECT:-auto} PEER=${PEER:-ceph} BLOCKSUMS=${BLOCKSUMS:-off}
CACHE=${CACHE:-/dev/shm} # where kaon mount's write journals go (a whole file: DD_MB)
work=$(mktemp -d /var/tmp/kaon-direct-bench.XXXXXX)
dir=${1:-} kaon=${2:-}
made=""
cmnt=$work/ceph kmnt=$work/kmnt kdata=$work/kaon
cleanup() {
	[ -n "${kaon:-}" ] && mountpoint -q "$kmnt" 2>/dev/null && { "$kaon" umount "$kmnt" || "$kaon" umount -f "$kmnt"; } >/dev/null 2>&1 || true
	[ -n "${kpid:-}" ] && kill "$kpid" 2>/dev/null && wait "$kpid" 2>/dev/null || true
	[ -n "${top:-}" ] && rm -rf "$top" || true
	[ -n "${cache:-}" ] && rm -rf "$cache" || true
	[ "$PEER" = ceph ] && [ -n "$dir" ] && "$repo/scripts/ceph-dev.sh" umount "$dir" "$cmnt" >/dev/null 2>&1 || true
	[ -n "$made" ] && "$repo/scripts/ceph-dev.sh" purge "$dir" >/dev/null 2>&1 || true
	rm -rf "$work" || true
}
trap cleanup EXIT
if [ -z "$kaon" ]; then
	kaon=$work/kaon-bin
	(cd "$repo" && go build -o "$kaon" ./cmd/kaon)
fi
mkdir -p "$cmnt" "$kmnt" "$kdata"
if [ "$PEER" = ceph ]; then
	if [ -z "$dir" ]; then
		dir=$work/cluster made=1
		"$repo/scripts/ceph-dev.sh" start "$dir" >&2
	fi
	"$repo/scripts/ceph-dev.sh" mount "$dir" "$cmnt" >&2
fi
[ "$PEER" = ceph ] || cmnt=$work/local
mkdir -p "$cmnt"
top=$cmnt/direct-bench-$$ # each run its own: Kaon refuses a place holding another instance's filesystem
mkdir -p "$top/raw" "$top/kaon"

"$kaon" up --data "$kdata" --http 127.0.0.1:0 --xrootd "${XRDCP:+127.0.0.1:0}" --fs 1 >"$work/kaon.log" 2>&1 &
kpid=$!
for _ in $(seq 300); do [ -f "$kdata/endpoints.json" ] && break; sleep 0.1; done
[ -f "$kdata/endpoints.json" ] || { cat "$work/kaon.log" >&2; exit 1; }
export KAON_URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$kdata/endpoints.json")
[ -n "$XRDCP" ] && XRD_URL=$(python3 -c 'import json,sys; x=json.load(open(sys.argv[1]))["xrootd"]; print(x if "://" in x else "root://" + x)' "$kdata/endpoints.json")
"$kaon" space define peer >/dev/null
"$kaon" fs add --node "$(hostname)" --path "$top/kaon/fs" --space peer >/dev/null
"$kaon" fs config "$("$kaon" fs ls | awk -v p="$top/kaon/fs" '$3 == p {print $2}')" blocksums="$BLOCKSUMS"
for _ in $(seq 300); do [ "$("$kaon" fs ls | grep -c booted)" -ge 2 ] && break; sleep 0.2; done
[ "$("$kaon" fs ls | grep -c booted)" -ge 2 ] || { "$kaon" fs ls >&2; echo "the filesystem in $top did not boot" >&2; exit 1; }
"$kaon" mkdir /bench
"$kaon" attr set /bench sys.forced.space=peer
# The setting reaches the storage server with a heartbeat: probe files
# until one is stored as the setting says (no sums: its stripe is its size).
head -c 100000 /dev/urandom >"$work/probe"
for i in $(seq 100); do
	curl -sSf -L -T "$work/probe" "$KAON_URL/bench/probe-$i" >/dev/null
	[ "$BLOCKSUMS" = on ] || [ -n "$(find "$top/kaon/fs" -type f -size 100000c)" ] && break
	sleep 0.5
done
cache=$(mktemp -d "$CACHE/kaon-direct-cache.XXXXXX")
[ -n "$XRDCP" ] && dd if=/dev/zero of="$cache/src" bs=1M count="$DD_MB" status=none # xrdcp's source
"$kaon" mount --url "$KAON_URL" --subtree /bench -o direct="$DIRECT" --cache "$cache" --log "$work/mount.log" "$kmnt"

now() { date +%s.%N; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
calc() { awk "BEGIN{printf \"%.1f\", $*}"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
declare -A R
# one NAME DIR: dd write then read of DIR/dd.bin, MB/s added to R.
one() {
	local n=$1 d=$2 t0 t1
	rm -f "$d/dd.bin"
	drop
	t0=$(now)
	if [ "$n" = xrdcp ]; then
		xrdcp -f -s "$cache/src" "$XRD_URL//bench/xrdcp.bin"
	else
		dd if=/dev/zero of="$d/dd.bin" bs=1M count="$DD_MB" conv=fsync status=none
	fi
	t1=$(now)
	R[w_$n]="${R[w_$n]:-} $(calc "$DD_MB * 1.048576 / ($t1 - $t0)")"
	drop
	t0=$(now)
	if [ "$n" = xrdcp ]; then
		xrdcp -f -s "$XRD_URL//bench/xrdcp.bin" /dev/null
	else
		dd if="$d/dd.bin" of=/dev/null bs=1M status=none
	fi
	t1=$(now)
	R[r_$n]="${R[r_$n]:-} $(calc "$DD_MB * 1.048576 / ($t1 - $t0)")"
	if [ "$n" = kaon ]; then
		path=$(getfattr --only-values -n kaon.datapath "$d/dd.bin" 2>/dev/null || echo "?")
	fi
	rm -f "$d/dd.bin"
}
echo "bench/mount/direct.sh: dd ${DD_MB} MiB, $ROUNDS rounds, kaon mount -o direct=$DIRECT (blocksums=$BLOCKSUMS) vs $PEER ($top), load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then
		one kaon "$kmnt"
		one peer "$top/raw"
		[ -z "$XRDCP" ] || one xrdcp "$cache"
	else
		[ -z "$XRDCP" ] || one xrdcp "$cache"
		one peer "$top/raw"
		one kaon "$kmnt"
	fi
	last() { echo "${R[$1]}" | awk '{print $NF}'; }
	echo "round $r: kaon write $(last w_kaon) read $(last r_kaon) ($path)," \
		"$PEER write $(last w_peer) read $(last r_peer)${XRDCP:+, xrdcp write $(last w_xrdcp) read $(last r_xrdcp)} MB/s, load $(cut -d' ' -f1 /proc/loadavg)"
done
printf '%-8s %12s %12s %8s' "dd" "kaon MB/s" "$PEER MB/s" "ratio"
[ -z "$XRDCP" ] || printf ' %12s %12s' "xrdcp MB/s" "kaon/xrdcp"
echo
for op in w r; do
	k=$(median ${R[${op}_kaon]}) p=$(median ${R[${op}_peer]})
	printf '%-8s %12s %12s %8s' "$([ $op = w ] && echo write || echo read)" "$k" "$p" "$(awk "BEGIN{printf \"%.2f\", $k / $p}")"
	if [ -n "$XRDCP" ]; then
		x=$(median ${R[${op}_xrdcp]})
		printf ' %12s %12s' "$x" "$(awk "BEGIN{printf \"%.2f\", $k / $x}")"
	fi
	echo
done
echo "kaon mount read path: $path; direct counters: $(getfattr --only-values -n kaon.stats "$kmnt" | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: v for k, v in d.get("counters", {}).items() if k.startswith("direct")}, d.get("extra", {}).get("direct"))' 2>/dev/null)"
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
