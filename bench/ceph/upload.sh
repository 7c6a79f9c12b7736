#!/usr/bin/env bash
# Uploads through Kaon onto Ceph against dd into the same CephFS mount
# (docs/CEPH.md "Kaon on Ceph"): 1 GiB, one stream at a time, alternating
#   dd    buffered + fsync into the ceph-fuse mount (the baseline)
#   curl  PUT through Kaon onto a filesystem inside that mount (space cephfs)
#   xrdcp the same over root://
#   curl and xrdcp onto a RADOS filesystem (space rados, pool kaon-rados)
# RUNS times each (median reported), the file removed and a pause between.
#
#   bench/ceph/upload.sh CLUSTER_DIR KAON_BINARY [RUNS] [SIZE_MIB]
#
# CLUSTER_DIR is a running scripts/ceph-dev.sh cluster; KAON_BINARY is
# built with -tags ceph. Prints MiB/s per run and the medians.
set -euo pipefail
dir=$1 kaon=$2 runs=${3:-3} mib=${4:-1024}
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /var/tmp/kaon-upload-bench.XXXXXX)
mnt=$work/mnt kdata=$work/kaon src=/dev/shm/kaon-upload-bench.$$
mkdir -p "$mnt" "$kdata"
cleanup() {
	[ -n "${kpid:-}" ] && kill "$kpid" 2>/dev/null && wait "$kpid" 2>/dev/null
	"$repo/scripts/ceph-dev.sh" umount "$dir" "$mnt" >/dev/null 2>&1 || true
	rm -rf "$work" "$src"
}
trap cleanup EXIT
. "$dir/env"
"$repo/scripts/ceph-dev.sh" mount "$dir" "$mnt" >/dev/null 2>&1
head -c $((mib << 20)) /dev/urandom >"$src"
top=$mnt/upload-bench-$$
mkdir -p "$top/dd"

"$kaon" up --data "$kdata" --http 127.0.0.1:0 --xrootd 127.0.0.1:0 --fs 1 --ceph-conf "$CEPH_CONF" --ceph-user kaon \
	>"$work/kaon.log" 2>&1 &
kpid=$!
for _ in $(seq 300); do [ -f "$kdata/endpoints.json" ] && break; sleep 0.1; done
http=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$kdata/endpoints.json")
xrd=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["xrootd"])' "$kdata/endpoints.json")
export KAON_URL=$http
node=$(hostname)
"$kaon" fs add --node "$node" --path "$top/fs" --space cephfs
"$kaon" fs add --node "$node" --rados --pool "$CEPH_RADOS_POOL" --ceph-conf "$CEPH_CONF" --ceph-user kaon --space rados
for _ in $(seq 300); do [ "$("$kaon" fs ls | grep -c booted)" -ge 3 ] && break; sleep 0.2; done
"$kaon" fs ls
for d in cephfs rados; do "$kaon" mkdir /$d && "$kaon" attr set /$d sys.forced.space=$d; done

rate() { python3 -c "print(round($mib / ($2 - $1), 1))"; }
now() { date +%s.%N; }
declare -A res
for r in $(seq "$runs"); do
	for what in dd curl-cephfs xrdcp-cephfs curl-rados xrdcp-rados; do
		sleep 5
		t0=$(now)
		case $what in
		dd) dd if="$src" of="$top/dd/f" bs=1M conv=fsync status=none ;;
		curl-*) curl -sS -f -L -T "$src" -o /dev/null "$http/${what#curl-}/f$r" ;;
		xrdcp-*) xrdcp -f -s "$src" "$xrd//${what#xrdcp-}/x$r" ;;
		esac
		t1=$(now)
		res[$what]+="$(rate "$t0" "$t1") "
		echo "run $r $what $(rate "$t0" "$t1") MiB/s (load $(cut -d' ' -f1 /proc/loadavg))"
		case $what in
		dd) rm -f "$top/dd/f" ;;
		curl-*) "$kaon" rm "/${what#curl-}/f$r" ;;
		xrdcp-*) "$kaon" rm "/${what#xrdcp-}/x$r" ;;
		esac
	done
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
d=$(med "${res[dd]}")
for what in dd curl-cephfs xrdcp-cephfs curl-rados xrdcp-rados; do
	m=$(med "${res[$what]}")
	echo "median $what $m MiB/s (${res[$what]}) ratio to dd $(python3 -c "print(round($m / $d, 2))")"
done
