#!/usr/bin/env bash
# Metadata storms with and without `kaon metafs`, on the MetaFS study's
# synthetic tree (4 368 nested directories, 74 256 files; gentree.py).
#
# usage: bench/metafs/bench.sh [WORKDIR]      (root, fuse3, strace, python3)
#        env RUNS=5 (timing repetitions, medians reported)  P=8 (parallel procs)
#
# Workloads ("software start-up"): ls -1R; find -ls; libsearch.py (336
# modules probed as NAME.so / NAME.py / NAME/__init__.py along a 12-directory
# search path, 96% of probes fail); startup = the three in sequence.
#
# How lower-filesystem operations are counted (a method that cannot flatter):
#   strace -f -y -e trace=%file,%desc records every path- or descriptor-based
#   system call, and -y prints the path behind each descriptor. A call counts
#   when any argument (a path, or a descriptor's path) lies in the tree below;
#   failed calls (the ENOENT probes) count too.
#   * without metafs: the workload's whole process tree is traced;
#   * with metafs: the workload runs untraced through the mount, and the
#     metafs daemon -- the only process that touches the tree below -- is
#     traced (all threads, attached for exactly the workload). Kernel
#     passthrough is disabled while counting, so data reads appear as
#     pread64 calls in the daemon instead of being invisible kernel reads.
#   Each metafs count uses a freshly mounted daemon (empty kernel caches).
#   A system call may cost several operations on a network filesystem (one
#   lookup per path component...), so the direct counts are a lower bound and
#   the reduction factor is conservative.
# Timing: cold = after `echo 3 > /proc/sys/vm/drop_caches` (and, for metafs,
# a fresh mount, whose load+check time is reported separately); warm = the
# same workload repeated. Runs are sequential on one machine, medians of RUNS.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

wl() { # wl WORKLOAD TARGET
	case $1 in
	ls) ls -1R "$2" >/dev/null ;;
	find) find "$2" -ls >/dev/null ;;
	lib) python3 "$HERE/libsearch.py" "$2" >/dev/null ;;
	startup) wl ls "$2"; wl find "$2"; wl lib "$2" ;;
	esac
}
if [[ ${1:-} == __run ]]; then # internal: one workload (strace target)
	wl "$2" "$3"
	exit 0
fi
if [[ ${1:-} == __par ]]; then # internal: P parallel start-ups
	for ((i = 0; i < $2; i++)); do wl startup "$3" & done
	wait
	exit 0
fi

WORK=${1:-/tmp/kaon-metafs-bench}
RUNS=${RUNS:-5}
P=${P:-8}
TREE=$WORK/lower-tree
MNT=$WORK/metafs-mnt
IDX=$WORK/lower-tree.metafs
KAON=$WORK/kaon
mkdir -p "$WORK" "$MNT"
(cd "$REPO" && go build -o "$KAON" ./cmd/kaon)
[[ -d $TREE ]] || python3 "$HERE/gentree.py" "$TREE"

now() { date +%s%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", (b-a)/1e6}'; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END{print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
dropcaches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# A line counts if it is a call's first line (not "<... resumed>"), the call is
# not FUSE protocol traffic, and the tree appears in its arguments. Calls that
# are no filesystem operation but may quote the tree in their data or argv
# (write, execve) and fd-local calls (fcntl, close) are left out -- for
# both sides, which only lowers the direct count (conservative).
count() {
	grep -v 'resumed>' "$1" | grep -v '</dev/fuse>' |
		awk '$2 !~ /^(execve|write|writev|fcntl|close)\(/' | grep -cF "$TREE" || true
}
breakdown() { grep -v 'resumed>' "$1" | grep -v '</dev/fuse>' | awk '$2 !~ /^(execve|write|writev|fcntl|close)\(/' |
	grep -F "$TREE" | awk '{sub(/\(.*/, "", $2); n[$2]++} END{for (k in n) printf "%s=%d ", k, n[k]}'; }
STRACE=(strace -f -y -qq -e trace=%file,%desc)

DPID=""
mount_metafs() { # mount_metafs [extra flags]; sets DPID
	"$KAON" metafs mount "$@" --index "$IDX" "$TREE" "$MNT" >"$WORK/daemon.log" 2>&1 &
	DPID=$!
	for _ in $(seq 200); do
		grep -q "kaon metafs: serving" "$WORK/daemon.log" 2>/dev/null && return 0
		sleep 0.05
	done
	cat "$WORK/daemon.log" >&2
	return 1
}
umount_metafs() {
	[[ -n $DPID ]] || return 0
	kill -TERM "$DPID" 2>/dev/null || true
	wait "$DPID" 2>/dev/null || true
	DPID=""
}
trap 'umount_metafs' EXIT

# ---- index build time and size ----
cold_b=() warm_b=()
for ((r = 0; r < RUNS; r++)); do
	dropcaches
	t0=$(now); "$KAON" metafs index "$TREE" -o "$IDX" >/dev/null; t1=$(now)
	cold_b+=("$(ms "$t0" "$t1")")
	t0=$(now); "$KAON" metafs index "$TREE" -o "$IDX" >"$WORK/index.out"; t1=$(now)
	warm_b+=("$(ms "$t0" "$t1")")
done
SIZE=$(stat -c %s "$IDX")
NENT=$(grep -o '[0-9]* entries' "$WORK/index.out" | cut -d' ' -f1)
MEM=$(grep -o '[0-9]* bytes in memory' "$WORK/index.out" | cut -d' ' -f1)
mount_times=()

# ---- lower-filesystem operations ----
declare -A DIRECT META META_WARM
for w in ls find lib startup; do
	dropcaches
	"${STRACE[@]}" -o "$WORK/direct.$w.strace" bash "$0" __run "$w" "$TREE"
	DIRECT[$w]=$(count "$WORK/direct.$w.strace")

	mount_metafs --no-passthrough
	"${STRACE[@]}" -p "$DPID" -o "$WORK/metafs.$w.strace" &
	SP=$!
	sleep 0.5
	wl "$w" "$MNT"
	sleep 0.3
	kill -INT $SP; wait $SP || true
	META[$w]=$(count "$WORK/metafs.$w.strace")
	"${STRACE[@]}" -p "$DPID" -o "$WORK/metafs-warm.$w.strace" &
	SP=$!
	sleep 0.5
	wl "$w" "$MNT"
	sleep 0.3
	kill -INT $SP; wait $SP || true
	META_WARM[$w]=$(count "$WORK/metafs-warm.$w.strace")
	umount_metafs
done

# ---- concurrency: P parallel start-ups, one mount ----
"${STRACE[@]}" -o "$WORK/direct.par.strace" bash "$0" __par "$P" "$TREE"
DIRECT_PAR=$(count "$WORK/direct.par.strace")
mount_metafs --no-passthrough
"${STRACE[@]}" -p "$DPID" -o "$WORK/metafs.par.strace" &
SP=$!
sleep 0.5
bash "$0" __par "$P" "$MNT"
sleep 0.3
kill -INT $SP; wait $SP || true
META_PAR=$(count "$WORK/metafs.par.strace")
umount_metafs

# ---- timing ----
declare -A DC DW MC MW
for w in ls find lib startup; do
	dc=() dw=() mc=() mw=()
	for ((r = 0; r < RUNS; r++)); do
		dropcaches
		t0=$(now); wl "$w" "$TREE"; t1=$(now); dc+=("$(ms "$t0" "$t1")")
		t0=$(now); wl "$w" "$TREE"; t1=$(now); dw+=("$(ms "$t0" "$t1")")
		dropcaches
		t0=$(now); mount_metafs; t1=$(now); mount_times+=("$(ms "$t0" "$t1")")
		t0=$(now); wl "$w" "$MNT"; t1=$(now); mc+=("$(ms "$t0" "$t1")")
		t0=$(now); wl "$w" "$MNT"; t1=$(now); mw+=("$(ms "$t0" "$t1")")
		umount_metafs
	done
	DC[$w]=$(echo "${dc[@]}" | median); DW[$w]=$(echo "${dw[@]}" | median)
	MC[$w]=$(echo "${mc[@]}" | median); MW[$w]=$(echo "${mw[@]}" | median)
done
pd=() pm=()
mount_metafs
for ((r = 0; r < RUNS; r++)); do
	bash "$0" __par "$P" "$TREE"; bash "$0" __par "$P" "$MNT" # warm both
	t0=$(now); bash "$0" __par "$P" "$TREE"; t1=$(now); pd+=("$(ms "$t0" "$t1")")
	t0=$(now); bash "$0" __par "$P" "$MNT"; t1=$(now); pm+=("$(ms "$t0" "$t1")")
done
umount_metafs
PD=$(echo "${pd[@]}" | median); PM=$(echo "${pm[@]}" | median)

# ---- kernel mode (--kernel: overlayfs over a tmpfs skeleton, no daemon) ----
# Its lower operations happen inside the kernel, where strace cannot see
# them, so both sides are counted at a pass-through FUSE layer over the tree
# (kaon cfsd with every kernel cache timeout at 0 and no passthrough: each
# lookup, getattr, readdir, open and read that reaches the tree below is a
# request there).
# The index's staleness check needs the real tree, so that mount is forced.
KERNEL=${KERNEL:-1}
if [[ $KERNEL == 1 ]]; then
	CNT=$WORK/count-mnt
	mkdir -p "$CNT"
	"$KAON" cfsd mount --backend "$TREE" --state "$WORK/cfsd-state" --entry-timeout 0 --attr-timeout 0 --negative-timeout 0 --no-passthrough \
		--log "$WORK/cfsd.log" "$CNT"
	cfsd_ops() { python3 -c 'import json,sys; print(sum(o["count"] for o in json.load(open(sys.argv[1]))["ops"].values()))' "$CNT/.proc/stats.json"; }
	declare -A KD KM KMW KC KW
	for w in ls find lib startup; do
		dropcaches
		a=$(cfsd_ops); wl "$w" "$CNT"; b=$(cfsd_ops); KD[$w]=$((b - a))
		"$KAON" metafs mount --kernel --force --index "$IDX" "$CNT" "$MNT" >/dev/null
		dropcaches
		a=$(cfsd_ops); wl "$w" "$MNT"; b=$(cfsd_ops); KM[$w]=$((b - a))
		a=$(cfsd_ops); wl "$w" "$MNT"; b=$(cfsd_ops); KMW[$w]=$((b - a))
		"$KAON" metafs umount "$MNT"
	done
	"$KAON" cfsd umount "$CNT"
	kmount=()
	for w in ls find lib startup; do
		kc=() kw=()
		for ((r = 0; r < RUNS; r++)); do
			t0=$(now); "$KAON" metafs mount --kernel --index "$IDX" "$TREE" "$MNT" >/dev/null; t1=$(now)
			kmount+=("$(ms "$t0" "$t1")")
			dropcaches
			t0=$(now); wl "$w" "$MNT"; t1=$(now); kc+=("$(ms "$t0" "$t1")")
			t0=$(now); wl "$w" "$MNT"; t1=$(now); kw+=("$(ms "$t0" "$t1")")
			"$KAON" metafs umount "$MNT"
		done
		KC[$w]=$(echo "${kc[@]}" | median); KW[$w]=$(echo "${kw[@]}" | median)
	done
	"$KAON" metafs mount --kernel --index "$IDX" "$TREE" "$MNT" >/dev/null
	pk=()
	for ((r = 0; r < RUNS; r++)); do
		bash "$0" __par "$P" "$MNT"
		t0=$(now); bash "$0" __par "$P" "$MNT"; t1=$(now); pk+=("$(ms "$t0" "$t1")")
	done
	"$KAON" metafs umount "$MNT"
	PK=$(echo "${pk[@]}" | median)
fi

# ---- report ----
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b==0) printf "%s/0", a; else printf "%.1fx", a/b }'; }
echo
echo "kaon metafs benchmark  $(date -u +%FT%TZ)  kernel $(uname -r)  $(nproc) cores  RUNS=$RUNS P=$P"
echo "tree: $TREE ($(df -T "$TREE" | awk 'NR==2{print $2}')), $NENT entries"
echo
printf "%-34s %12s %12s\n" "index" "cold" "warm"
printf "%-34s %10s ms %10s ms\n" "build time (median)" "$(echo "${cold_b[@]}" | median)" "$(echo "${warm_b[@]}" | median)"
printf "%-34s %12s bytes (goal < 4 700 000); %s bytes in memory\n" "index file size" "$SIZE" "$MEM"
printf "%-34s %10s ms (load + staleness check + mount, median)\n" "mount time, cold" "$(echo "${mount_times[@]}" | median)"
echo
echo "operations reaching the filesystem below (strace, see header)"
printf "%-10s %12s %14s %14s %10s\n" workload direct "metafs(cold)" "metafs(warm)" reduction
for w in ls find lib startup; do
	printf "%-10s %12s %14s %14s %10s\n" "$w" "${DIRECT[$w]}" "${META[$w]}" "${META_WARM[$w]}" "$(ratio "${DIRECT[$w]}" "${META[$w]}")"
done
printf "%-10s %12s %14s %14s %10s\n" "startup x$P" "$DIRECT_PAR" "$META_PAR" "-" "$(ratio "$DIRECT_PAR" "$META_PAR")"
echo "(one start-up through metafs: ${META[startup]} lower ops; $P in parallel on one mount: $META_PAR)"
echo "by call, direct start-up:  $(breakdown "$WORK/direct.startup.strace")"
echo "by call, metafs start-up:  $(breakdown "$WORK/metafs.startup.strace")"
echo "by call, metafs x$P:        $(breakdown "$WORK/metafs.par.strace")"
echo
echo "wall time, ms (median of $RUNS)"
# timetable LABEL COLD WARM PAR: direct vs LABEL, cold and warm (COLD and
# WARM name arrays keyed by workload; PAR is the parallel warm time).
timetable() {
	local -n cold=$2 warm=$3
	local f="%-10s %10s %10s %8s %10s %10s %8s\n" w
	printf "$f" workload "direct" "$1" "ratio" "direct" "$1" "ratio"
	printf "$f" "" "cold" "cold" "" "warm" "warm" ""
	for w in ls find lib startup; do
		printf "$f" "$w" "${DC[$w]}" "${cold[$w]}" "$(ratio "${DC[$w]}" "${cold[$w]}")" \
			"${DW[$w]}" "${warm[$w]}" "$(ratio "${DW[$w]}" "${warm[$w]}")"
	done
	printf "$f" "startup x$P" "-" "-" "" "$PD" "$4" "$(ratio "$PD" "$4")"
}
timetable metafs MC MW "$PM"
echo "(ratio = direct/metafs: > 1 means metafs is faster)"
if [[ $KERNEL == 1 ]]; then
	echo
	echo "kernel mode (--kernel): mount (load + check + skeleton + overlay) $(echo "${kmount[@]}" | median) ms median"
	echo "operations reaching the tree below, counted at a zero-cache FUSE layer (kaon cfsd) under both"
	printf "%-10s %12s %14s %14s %10s\n" workload direct "kernel(cold)" "kernel(warm)" reduction
	for w in ls find lib startup; do
		printf "%-10s %12s %14s %14s %10s\n" "$w" "${KD[$w]}" "${KM[$w]}" "${KMW[$w]}" "$(ratio "${KD[$w]}" "${KM[$w]}")"
	done
	echo "wall time, ms (median of $RUNS; direct columns from the table above)"
	timetable kernel KC KW "$PK"
fi
