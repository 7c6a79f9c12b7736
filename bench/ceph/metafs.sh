#!/usr/bin/env bash
# kaon metafs over CephFS, its intended setting: a shared filesystem whose
# every metadata request goes to an MDS. The workloads of bench/metafs (the
# MetaFS study's tree of 4 368 directories and 74 256 files; ls -1R, find
# -ls, libsearch.py, startup = the three in sequence, and P parallel
# start-ups) run on a ceph-fuse mount directly and through metafs over the
# same tree, and the script reads the MDS's own request counter
# (mds_server.handle_client_request from `perf dump` on its admin socket)
# before and after each of them: requests the MDS served for the workload.
#
#   bench/ceph/metafs.sh [CLUSTER_DIR]     RUNS=3 P=8 MODES="fuse kernel" KAON=BINARY (else built)
#
# cold = a fresh ceph-fuse client (unmounted and mounted again, which drops
#        everything the client held: dentries, inodes, capabilities, data)
#        plus `echo 3 > /proc/sys/vm/drop_caches`; for metafs the daemon is
#        mounted after that (its mount time and index load are reported
#        apart, with the MDS requests they made; its staleness check runs
#        as it would in production: a remounted tree keeps its inodes);
# warm = the same workload again right after.
# Times and request counts are medians of RUNS. Without CLUSTER_DIR a
# cluster is made with scripts/ceph-dev.sh and purged at the end. Root.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-3} P=${P:-8} MODES=${MODES:-fuse kernel}
work=$(mktemp -d /var/tmp/kaon-metafs-ceph.XXXXXX)
dir=${1:-} made=""
mnt=$work/mnt mmnt=$work/metafs idx=$work/tree.metafs kaon=${KAON:-$work/kaon}
DPID=""
umount_metafs() {
	[ -n "$DPID" ] || return 0
	kill -TERM "$DPID" 2>/dev/null || true
	wait "$DPID" 2>/dev/null || true
	DPID=""
}
cleanup() {
	umount_metafs || true
	[ -n "$dir" ] && rm -rf "$mnt/metafs-bench-$$" || true
	[ -n "$dir" ] && "$repo/scripts/ceph-dev.sh" umount "$dir" "$mnt" >/dev/null 2>&1 || true
	[ -n "$made" ] && "$repo/scripts/ceph-dev.sh" purge "$dir" >/dev/null 2>&1 || true
	rm -rf "$work" || true
}
trap cleanup EXIT
if [ -z "$dir" ]; then
	dir=$work/ceph made=1
	"$repo/scripts/ceph-dev.sh" start "$dir" >&2
fi
[ -x "$kaon" ] || (cd "$repo" && go build -o "$kaon" ./cmd/kaon)
mkdir -p "$mnt" "$mmnt"
export CEPH_CONF=$dir/ceph.conf
asok=$dir/run/ceph-mds.a.asok
mds_requests() {
	ceph --admin-daemon "$asok" perf dump mds_server |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["mds_server"]["handle_client_request"])'
}
remount() { # a fresh ceph-fuse client and empty kernel caches
	"$repo/scripts/ceph-dev.sh" umount "$dir" "$mnt" >/dev/null 2>&1 || true
	"$repo/scripts/ceph-dev.sh" mount "$dir" "$mnt" >/dev/null 2>&1
	sync
	echo 3 >/proc/sys/vm/drop_caches
}
now() { date +%s%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", (b-a)/1e6}'; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END{print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
wl() { bash "$repo/bench/metafs/bench.sh" __run "$1" "$2"; }
par() { bash "$repo/bench/metafs/bench.sh" __par "$P" "$1"; }
run_measured() { # run_measured CMD...: "ms requests" of CMD
	local r0 r1 t0 t1
	r0=$(mds_requests); t0=$(now)
	"$@" >/dev/null
	t1=$(now); r1=$(mds_requests)
	echo "$(ms "$t0" "$t1") $((r1 - r0))"
}
mount_metafs() { # mount_metafs [flags]: sets DPID, and MT MR: ms and MDS requests of the mount
	local r0 r1 t0 t1
	r0=$(mds_requests); t0=$(now)
	"$kaon" metafs mount "$@" --index "$idx" "$tree" "$mmnt" >"$work/daemon.log" 2>&1 &
	DPID=$!
	for _ in $(seq 600); do
		grep -q "kaon metafs: serving" "$work/daemon.log" 2>/dev/null && break
		sleep 0.05
	done
	grep -q "kaon metafs: serving" "$work/daemon.log" || { cat "$work/daemon.log" >&2; echo "metafs mount failed" >&2; exit 1; }
	t1=$(now); r1=$(mds_requests)
	MT=$(ms "$t0" "$t1") MR=$((r1 - r0))
}

"$repo/scripts/ceph-dev.sh" mount "$dir" "$mnt" >&2
tree=$mnt/metafs-bench-$$/tree
t0=$(now)
python3 "$repo/bench/metafs/gentree.py" "$tree" >/dev/null
echo "tree made on ceph-fuse in $(ms "$t0" "$(now)") ms" >&2
remount
read -r t r < <(run_measured "$kaon" metafs index "$tree" -o "$idx")
echo "index built cold in $t ms, $r MDS requests" >&2
index_line="index build, cold client: $t ms, $r MDS requests; index $(stat -c %s "$idx") bytes"

declare -A T R
add() { T[$1]="${T[$1]:-} $2" R[$1]="${R[$1]:-} $3"; }
for ((run = 0; run < RUNS; run++)); do
	for w in ls find lib startup par; do
		# direct on ceph-fuse, then through each metafs mode, alternating
		order="direct $MODES"
		((run % 2)) && order="$MODES direct"
		for side in $order; do
			remount
			if [ "$side" = direct ]; then
				target=$tree
			else
				flags=()
				[ "$side" = kernel ] && flags=(--kernel)
				mount_metafs "${flags[@]}"
				add "$side.mount.$w" "$MT" "$MR"
				sync
				echo 3 >/proc/sys/vm/drop_caches
				target=$mmnt
			fi
			if [ "$w" = par ]; then
				read -r t r < <(run_measured par "$target")
				add "$side.cold.$w" "$t" "$r"
				read -r t r < <(run_measured par "$target")
			else
				read -r t r < <(run_measured wl "$w" "$target")
				add "$side.cold.$w" "$t" "$r"
				read -r t r < <(run_measured wl "$w" "$target")
			fi
			add "$side.warm.$w" "$t" "$r"
			umount_metafs
			echo "run $((run + 1)) $w $side: cold ${T[$side.cold.$w]##* } ms ${R[$side.cold.$w]##* } req, warm ${T[$side.warm.$w]##* } ms ${R[$side.warm.$w]##* } req (load $(cut -d' ' -f1 /proc/loadavg))" >&2
		done
	done
done

med() { echo "${1:-}" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b==0) printf "%s/0", a; else printf "%.1fx", a/b }'; }
echo "kaon metafs over CephFS (ceph-fuse, Ceph $(ceph --version | awk '{print $3}')), $(nproc) cores, RUNS=$RUNS P=$P, medians"
echo "tree: $(find "$tree" | wc -l) entries; cold = fresh ceph-fuse client + drop_caches; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$index_line"
for mode in $MODES; do
	echo
	echo "== metafs $mode mode =="
	printf '%-10s %10s %10s %9s %10s %10s %9s | %10s %10s %8s %10s %10s %8s | %s\n' workload "direct" "metafs" "fewer" "direct" "metafs" "fewer" \
		"direct" "metafs" "faster" "direct" "metafs" "faster" "metafs mount"
	printf '%-10s %10s %10s %9s %10s %10s %9s | %10s %10s %8s %10s %10s %8s | %s\n' "" "req cold" "req cold" "" "req warm" "req warm" "" \
		"ms cold" "ms cold" "" "ms warm" "ms warm" "" "ms, MDS req"
	for w in ls find lib startup par; do
		name=$w
		[ "$w" = par ] && name="startup x$P"
		dc=$(med "${R[direct.cold.$w]}") mc=$(med "${R[$mode.cold.$w]}") dw=$(med "${R[direct.warm.$w]}") mw=$(med "${R[$mode.warm.$w]}")
		tdc=$(med "${T[direct.cold.$w]}") tmc=$(med "${T[$mode.cold.$w]}") tdw=$(med "${T[direct.warm.$w]}") tmw=$(med "${T[$mode.warm.$w]}")
		printf '%-10s %10s %10s %9s %10s %10s %9s | %10s %10s %8s %10s %10s %8s | %s\n' "$name" "$dc" "$mc" "$(ratio "$dc" "$mc")" "$dw" "$mw" "$(ratio "$dw" "$mw")" \
			"$tdc" "$tmc" "$(ratio "$tdc" "$tmc")" "$tdw" "$tmw" "$(ratio "$tdw" "$tmw")" "$(med "${T[$mode.mount.$w]}"), $(med "${R[$mode.mount.$w]}")"
	done
done
echo "(fewer = direct/metafs MDS requests; faster = direct/metafs time; > 1 favours metafs)"
for k in $(printf '%s\n' "${!T[@]}" | sort); do echo "raw $k: ms${T[$k]}; req${R[$k]}"; done
