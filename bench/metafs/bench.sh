#!/usr/bin/env bash
# Metadata storms with and without `kaon metafs`, on the MetaFS study's
# synthetic tree (4 368 nested directories, 74 256 files; gentree.py).
#
# usage: bench/metafs/bench.sh [WORKDIR]      (root, fuse3, strace, python3)
#        env RUNS=5 (timing repetitions, medians reported)  P=8 (parallel procs)
#        MODES="fuse kernel" (which metafs modes to measure)
#
# Workloads ("software start-up"): ls -1R; find -ls; libsearch.py (336
# modules probed as NAME.so / NAME.py / NAME/__init__.py along a 12-directory
# search path, 96% of probes fail); startup = the three in sequence.
#
# Two ways of serving: FUSE (the daemon answers the kernel's requests from
# the index) and --kernel (the index becomes a tmpfs skeleton the kernel
# serves itself; the daemon only copies a file's data in on its first open).
#
# How lower-filesystem operations are counted (a method that cannot flatter):
#   strace -f -y -e trace=%file,%desc records every path- or descriptor-based
#   system call, and -y prints the path behind each descriptor. A call counts
#   when any argument (a path, or a descriptor's path) lies in the tree below;
#   failed calls (the ENOENT probes) count too.
#   * without metafs: the workload's whole process tree is traced;
#   * with metafs: the workload runs untraced through the mount, and the
#     metafs daemon -- in both modes the only process that touches the tree
#     below, and nothing in the kernel does it on the workload's behalf -- is
#     traced (all threads, attached for exactly the workload). FUSE kernel
#     passthrough is disabled while counting, so data reads appear as
#     pread64 calls in the daemon instead of being invisible kernel reads.
#   Each metafs count uses a freshly mounted daemon (empty caches).
#   A system call may cost several operations on a network filesystem (one
#   lookup per path component...), so the direct counts are a lower bound and
#   the reduction factor is conservative.
# Timing: cold = after `echo 3 > /proc/sys/vm/drop_caches` (for metafs: a
# fresh mount, then the drop; load+check+mount time is reported
# separately); warm = the same workload repeated. Runs are sequential on one
# machine, medians of RUNS.
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

# ---- per mode: lower-filesystem operations, then timing ----
declare -A DIRECT DC DW
for w in ls find lib startup; do
	dropcaches
	"${STRACE[@]}" -o "$WORK/direct.$w.strace" bash "$0" __run "$w" "$TREE"
	DIRECT[$w]=$(count "$WORK/direct.$w.strace")
done
"${STRACE[@]}" -o "$WORK/direct.par.strace" bash "$0" __par "$P" "$TREE"
DIRECT_PAR=$(count "$WORK/direct.par.strace")
for w in ls find lib startup; do
	dc=() dw=()
	for ((r = 0; r < RUNS; r++)); do
		dropcaches
		t0=$(now); wl "$w" "$TREE"; t1=$(now); dc+=("$(ms "$t0" "$t1")")
		t0=$(now); wl "$w" "$TREE"; t1=$(now); dw+=("$(ms "$t0" "$t1")")
	done
	DC[$w]=$(echo "${dc[@]}" | median); DW[$w]=$(echo "${dw[@]}" | median)
done
pd=()
for ((r = 0; r < RUNS; r++)); do
	bash "$0" __par "$P" "$TREE"
	t0=$(now); bash "$0" __par "$P" "$TREE"; t1=$(now); pd+=("$(ms "$t0" "$t1")")
done
PD=$(echo "${pd[@]}" | median)

traced() { # traced NAME COMMAND...: count the daemon's lower operations during COMMAND
	"${STRACE[@]}" -p "$DPID" -o "$WORK/$1.strace" &
	local sp=$!
	sleep 0.5
	"${@:2}"
	sleep 0.3
	kill -INT $sp; wait $sp || true
	count "$WORK/$1.strace"
}
MODES=${MODES:-"fuse kernel"}
declare -A META META_WARM META_PAR MC MW PM MOUNT_T
for mode in $MODES; do
	flags=() cflags=(--no-passthrough)
	[[ $mode == kernel ]] && flags=(--kernel) cflags=(--kernel)
	for w in ls find lib startup; do
		mount_metafs "${cflags[@]}"
		dropcaches
		META[$mode.$w]=$(traced "$mode.$w" wl "$w" "$MNT")
		META_WARM[$mode.$w]=$(traced "$mode-warm.$w" wl "$w" "$MNT")
		umount_metafs
	done
	mount_metafs "${cflags[@]}"
	META_PAR[$mode]=$(traced "$mode.par" bash "$0" __par "$P" "$MNT")
	umount_metafs
	mt=()
	for w in ls find lib startup; do
		mc=() mw=()
		for ((r = 0; r < RUNS; r++)); do
			t0=$(now); mount_metafs "${flags[@]}"; t1=$(now); mt+=("$(ms "$t0" "$t1")")
			dropcaches
			t0=$(now); wl "$w" "$MNT"; t1=$(now); mc+=("$(ms "$t0" "$t1")")
			t0=$(now); wl "$w" "$MNT"; t1=$(now); mw+=("$(ms "$t0" "$t1")")
			umount_metafs
		done
		MC[$mode.$w]=$(echo "${mc[@]}" | median); MW[$mode.$w]=$(echo "${mw[@]}" | median)
	done
	MOUNT_T[$mode]=$(echo "${mt[@]}" | median)
	pm=()
	mount_metafs "${flags[@]}"
	for ((r = 0; r < RUNS; r++)); do
		bash "$0" __par "$P" "$MNT"
		t0=$(now); bash "$0" __par "$P" "$MNT"; t1=$(now); pm+=("$(ms "$t0" "$t1")")
	done
	umount_metafs
	PM[$mode]=$(echo "${pm[@]}" | median)
done

# ---- report ----
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b==0) printf "%s/0", a; else printf "%.1fx", a/b }'; }
echo
echo "kaon metafs benchmark  $(date -u +%FT%TZ)  kernel $(uname -r)  $(nproc) cores  RUNS=$RUNS P=$P"
echo "tree: $TREE ($(df -T "$TREE" | awk 'NR==2{print $2}')), $NENT entries"
echo
printf "%-34s %12s %12s\n" "index" "cold" "warm"
printf "%-34s %10s ms %10s ms\n" "build time (median)" "$(echo "${cold_b[@]}" | median)" "$(echo "${warm_b[@]}" | median)"
printf "%-34s %12s bytes (goal < 4 700 000); %s bytes in memory\n" "index file size" "$SIZE" "$MEM"
for mode in $MODES; do
	printf "%-34s %10s ms (load + staleness check + mount, median)\n" "$mode mount time" "${MOUNT_T[$mode]}"
done
for mode in $MODES; do
	echo
	echo "== $mode mode =="
	echo "operations reaching the filesystem below (strace, see header)"
	printf "%-12s %12s %14s %14s %10s\n" workload direct "metafs(cold)" "metafs(warm)" reduction
	for w in ls find lib startup; do
		printf "%-12s %12s %14s %14s %10s\n" "$w" "${DIRECT[$w]}" "${META[$mode.$w]}" "${META_WARM[$mode.$w]}" "$(ratio "${DIRECT[$w]}" "${META[$mode.$w]}")"
	done
	printf "%-12s %12s %14s %14s %10s\n" "startup x$P" "$DIRECT_PAR" "${META_PAR[$mode]}" "-" "$(ratio "$DIRECT_PAR" "${META_PAR[$mode]}")"
	echo "by call, direct start-up:  $(breakdown "$WORK/direct.startup.strace")"
	echo "by call, metafs start-up:  $(breakdown "$WORK/$mode.startup.strace")"
	echo "by call, metafs x$P:        $(breakdown "$WORK/$mode.par.strace")"
	echo
	echo "wall time, ms (median of $RUNS)"
	f="%-12s %10s %10s %8s %10s %10s %8s\n"
	printf "$f" workload "direct" "metafs" "ratio" "direct" "metafs" "ratio"
	printf "$f" "" "cold" "cold" "" "warm" "warm" ""
	for w in ls find lib startup; do
		printf "$f" "$w" "${DC[$w]}" "${MC[$mode.$w]}" "$(ratio "${DC[$w]}" "${MC[$mode.$w]}")" \
			"${DW[$w]}" "${MW[$mode.$w]}" "$(ratio "${DW[$w]}" "${MW[$mode.$w]}")"
	done
	printf "$f" "startup x$P" "-" "-" "" "$PD" "${PM[$mode]}" "$(ratio "$PD" "${PM[$mode]}")"
done
echo "(ratio = direct/metafs: > 1 means metafs is faster)"
