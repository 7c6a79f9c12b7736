#!/usr/bin/env bash
# Parallel streams onto Ceph, the measurement of the EOS-on-CephFS paper
# (docs/CEPH.md "Streams, tails and CPU"), in one run of `kaon bench stream`:
#   raw:POOL-SIZE        dd-like streams (1 MiB writes, fsync; 1 MiB reads)
#                        straight into a ceph-fuse mount: the paper's
#                        "backend" rows
#   cephfs-POOL-SIZE     the same streams through Kaon onto a filesystem
#                        inside that mount: the "frontend" rows
#   rados-POOL-SIZE      through Kaon onto a RADOS filesystem
# for POOL in rep (replicated, size 3) and ec (erasure-coded 2+1) and SIZE
# the object size (CephFS layout object size = stripe unit, RADOS object
# size): 4, 16 and 64 MiB. Every row runs ROUNDS times, alternating the
# order; medians of the per-stream average, sigma, rate, p99 and max, the
# p99/avg tail and its ratio to the raw row of the same pool and object
# size, and CPU seconds per GiB of the Kaon server and of ceph-fuse.
#
#   bench/ceph/stream.sh [CLUSTER_DIR [KAON_BINARY]]
#
# Without CLUSTER_DIR a cluster is made with scripts/ceph-dev.sh in a
# temporary directory and purged at the end; without KAON_BINARY Kaon is
# built with -tags ceph. Environment (defaults):
#   STREAMS=32 SIZE=64M ROUNDS=3 PAUSE=5s OBJECT_SIZES="4 16 64" POOLS="rep ec"
#   KINDS="cephfs rados" OPS=write,read STREAM_MEMORY=256 (MiB, kaon --stream-memory: its default)
#   PLOT=FILE.png (the tails, see kaon bench stream --plot) OUT=FILE (the table; the
#   server's log is kept as FILE.kaon.log)
# Needs root (ceph-fuse, drop_caches).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
STREAMS=${STREAMS:-32} SIZE=${SIZE:-64M} ROUNDS=${ROUNDS:-3} PAUSE=${PAUSE:-5s}
OBJECT_SIZES=${OBJECT_SIZES:-4 16 64} POOLS=${POOLS:-rep ec} KINDS=${KINDS:-cephfs rados}
OPS=${OPS:-write,read} STREAM_MEMORY=${STREAM_MEMORY:-256}
work=$(mktemp -d /var/tmp/kaon-stream-bench.XXXXXX)
dir=${1:-} kaon=${2:-}
made="" radosns=()
mnt=$work/mnt kdata=$work/kaon
cleanup() {
	[ -n "${kpid:-}" ] && kill "$kpid" 2>/dev/null && wait "$kpid" 2>/dev/null || true
	[ -n "${OUT:-}" ] && cp "$work/kaon.log" "$OUT.kaon.log" 2>/dev/null || true
	[ -n "${top:-}" ] && rm -rf "$top" || true
	for pn in "${radosns[@]}"; do # what Kaon left in its RADOS namespaces (identity markers)
		rados --id kaon -p "${pn%%/*}" -N "${pn#*/}" ls 2>/dev/null | while read -r o; do rados --id kaon -p "${pn%%/*}" -N "${pn#*/}" rm "$o" || true; done
	done
	[ -n "$dir" ] && "$repo/scripts/ceph-dev.sh" umount "$dir" "$mnt" >/dev/null 2>&1 || true
	[ -n "$made" ] && "$repo/scripts/ceph-dev.sh" purge "$dir" >/dev/null 2>&1 || true
	rm -rf "$work" || true
}
trap cleanup EXIT
if [ -z "$dir" ]; then
	dir=$work/ceph made=1
	"$repo/scripts/ceph-dev.sh" start "$dir" >&2
fi
if [ -z "$kaon" ]; then
	kaon=$work/kaon-bin
	(cd "$repo" && go build -tags ceph -o "$kaon" ./cmd/kaon)
fi
. "$dir/env"
mkdir -p "$mnt" "$kdata"
"$repo/scripts/ceph-dev.sh" mount "$dir" "$mnt" >&2
fusepid=$(cat "$dir/run/fuse-$(grep -lx "$mnt" "$dir"/mounts/* | xargs basename).pid")
top=$mnt/stream-bench-$$ # each run its own: Kaon refuses a place holding another instance's filesystem
mkdir -p "$top"

pool_of() { # pool_of KIND POOL: the Ceph pool
	case $1-$2 in
	*-ec) echo "$CEPH_FS_EC_POOL" ;;
	rados-rep) echo "$CEPH_RADOS_POOL" ;;
	*) echo "$CEPH_FS_DATA_POOL" ;;
	esac
}

"$kaon" up --data "$kdata" --http 127.0.0.1:0 --xrootd "" --fs 1 --stream-memory "$STREAM_MEMORY" \
	--ceph-conf "$CEPH_CONF" --ceph-user kaon >"$work/kaon.log" 2>&1 &
kpid=$!
for _ in $(seq 300); do [ -f "$kdata/endpoints.json" ] && break; sleep 0.1; done
[ -f "$kdata/endpoints.json" ] || { cat "$work/kaon.log" >&2; exit 1; }
export KAON_URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$kdata/endpoints.json")
node=$(hostname)
raws=() spaces=() nfs=1
for p in $POOLS; do
	for o in $OBJECT_SIZES; do
		name=$p-${o}M
		# raw: a directory of the mount with the layout Kaon gives its spaces
		mkdir -p "$top/raw/$name"
		setfattr -n ceph.dir.layout.pool -v "$(pool_of cephfs "$p")" "$top/raw/$name"
		setfattr -n ceph.dir.layout -v "stripe_unit=$((o << 20)) stripe_count=1 object_size=$((o << 20))" "$top/raw/$name"
		raws+=(--raw-dir "$name=$top/raw/$name")
		for k in $KINDS; do
			s=$k-$name
			"$kaon" space define "$s" >/dev/null
			case $k in
			cephfs)
				"$kaon" space config "$s" cephfs.pool="$(pool_of cephfs "$p")" >/dev/null
				"$kaon" space config "$s" cephfs.object-size="${o}M" >/dev/null
				"$kaon" fs add --node "$node" --path "$top/kaon/$s" --space "$s" >/dev/null ;;
			rados)
				radosns+=("$(pool_of rados "$p")/bench-$$-$s")
				"$kaon" fs add --node "$node" --rados --pool "$(pool_of rados "$p")" --namespace "bench-$$-$s" --object-size "${o}M" \
					--ceph-conf "$CEPH_CONF" --ceph-user kaon --space "$s" >/dev/null ;;
			esac
			spaces+=("$s") nfs=$((nfs + 1))
		done
	done
done
for _ in $(seq 300); do [ "$("$kaon" fs ls | grep -c booted)" -ge "$nfs" ] && break; sleep 0.2; done
"$kaon" fs ls >&2
[ "$("$kaon" fs ls | grep -c booted)" -ge "$nfs" ] || { echo "not every filesystem booted" >&2; exit 1; }
spacelist=$(IFS=,; echo "${spaces[*]}")
plot=()
[ -n "${PLOT:-}" ] && plot=(--plot "$PLOT")
echo "bench/ceph/stream.sh: $STREAMS streams x $SIZE, $ROUNDS rounds, pools $POOLS, object sizes $OBJECT_SIZES MiB, OSD store $CEPH_OSD_STORE, load $(cut -d' ' -f1-3 /proc/loadavg)" |
	tee ${OUT:+"$OUT"}
"$kaon" bench stream --data "$kdata" --layouts plain --spaces "$spacelist" "${raws[@]}" --streams "$STREAMS" --size "$SIZE" \
	--rounds "$ROUNDS" --pause "$PAUSE" --ops "$OPS" --drop-caches --cpu-pids "$fusepid" "${plot[@]}" -v | tee -a ${OUT:+"$OUT"}
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a ${OUT:+"$OUT"}
