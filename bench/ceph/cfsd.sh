#!/usr/bin/env bash
# kaon cfsd over CephFS, the setting EOS measured eoscfsd in: the cfsd
# benchmark (bench/cfsd/bench.sh: untar of the Go source tree, dd 2 GiB
# write and read, ls -lR and find -ls cold and warm) with its backend a
# directory of a ceph-fuse mount, cfsd over that directory against the
# ceph-fuse mount itself, alternating, medians of RUNS.
#
#   bench/ceph/cfsd.sh [CLUSTER_DIR]        RUNS=3 DD_MB=2048 NULLFS=0 (no nullfs column) KAON=BINARY
#
# "cold" is after `sync; echo 3 > /proc/sys/vm/drop_caches`: the kernel's
# page, dentry and inode caches of both mounts; ceph-fuse keeps what its
# own client cache holds (metadata it has capabilities for, up to
# client_oc_size of data), for both sides alike. Without CLUSTER_DIR a
# cluster is made with scripts/ceph-dev.sh and purged at the end. Root.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /var/tmp/kaon-cfsd-ceph.XXXXXX)
dir=${1:-} made=""
mnt=$work/mnt
cleanup() {
	[ -n "$dir" ] && "$repo/scripts/ceph-dev.sh" umount "$dir" "$mnt" >/dev/null 2>&1 || true
	[ -n "$made" ] && "$repo/scripts/ceph-dev.sh" purge "$dir" >/dev/null 2>&1 || true
	rm -rf "$work" || true
}
trap cleanup EXIT
if [ -z "$dir" ]; then
	dir=$work/ceph made=1
	"$repo/scripts/ceph-dev.sh" start "$dir" >&2
fi
"$repo/scripts/ceph-dev.sh" mount "$dir" "$mnt" >&2
mkdir -p "$mnt/cfsd-bench"
echo "bench/ceph/cfsd.sh: backend $mnt/cfsd-bench (ceph-fuse, data pool $(getfattr --only-values -n ceph.dir.layout.pool "$mnt" 2>/dev/null || echo default)), load $(cut -d' ' -f1-3 /proc/loadavg)"
BACKEND=$mnt/cfsd-bench WORK=$work/cfsd NULLFS=${NULLFS:-0} RUNS=${RUNS:-3} DD_MB=${DD_MB:-2048} "$repo/bench/cfsd/bench.sh"
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
