#!/usr/bin/env bash
# IO500's phases (`kaon bench io500 DIR`: ior-easy/hard with fio,
# mdtest-easy/hard, find) on kaon mount, kaon cfsd over a local directory,
# ceph-fuse and ext4, in one run: ROUNDS rounds, the order of the file
# systems rotated every round, medians of every phase and of the scores,
# the ratio of each to ext4 and kaon's to each peer, the load average.
#
#   sudo bench/mount/io500.sh                 # ROUNDS=3, IO500_ARGS="--procs 4"
#   ROUNDS=1 IO500_ARGS="--procs 2 --easy-size 32M --hard-writes 200 --easy-files 500 --hard-files 200" bench/mount/io500.sh
#   FS="kaon ext4" CEPH_DIR=/var/tmp/c OUT=DIR KAON=BINARY bench/mount/io500.sh
#
# Set-up and clean-up are bench/mount/peers.sh's (see bench.sh). Root.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${ROUNDS:-3}
IO500_ARGS=${IO500_ARGS:---procs 4}
FS=${FS:-kaon cfsd ceph ext4}
OUT=${OUT:-$repo/bench/out/mount}
. "$repo/bench/mount/peers.sh"
mkdir -p "$OUT"

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
calc() { awk "BEGIN{printf \"%.6f\", $*}"; }
declare -A R
PHASES=()
LOADS=()
for r in $(seq 1 "$ROUNDS"); do
	n=${#FSL[@]} k=$(((r - 1) % n))
	order=("${FSL[@]:k}" "${FSL[@]:0:k}")
	for f in "${order[@]}"; do
		log "round $r of $ROUNDS: io500 on $f"
		# shellcheck disable=SC2086
		"$KAON" bench io500 --drop-caches $IO500_ARGS "${D[$f]}" >"$W/io500.out"
		while read -r tag name value _; do
			[ "$tag" = "[RESULT]" ] || continue
			R[${name}_$f]="${R[${name}_$f]:-} $value"
			[ "$r" = 1 ] && [ "$f" = "${order[0]}" ] && PHASES+=("$name")
		done <"$W/io500.out"
		read -r bw md total < <(awk '/^\[SCORE/{print $4, $8, $12}' "$W/io500.out")
		R[bw_$f]="${R[bw_$f]:-} $bw" R[md_$f]="${R[md_$f]:-} $md" R[score_$f]="${R[score_$f]:-} $total"
		head -1 "$W/io500.out" >"$W/io500.head"
	done
	LOADS+=("$(cut -d' ' -f1-3 /proc/loadavg)")
done

{
	echo "IO500 phases (kaon bench io500) on ${FSL[*]}: $ROUNDS rounds (order rotated), medians; $(uname -r), $(nproc) cores; $(date -u +%FT%TZ)"
	sed 's/^io500 in [^:]*: /settings: /' "$W/io500.head"
	echo "load average after each round: ${LOADS[*]}"
	printf '\n%-20s %-6s' phase unit
	for f in "${FSL[@]}"; do printf ' %11s' "$f"; done
	for f in "${FSL[@]}"; do [ "$f" = ext4 ] || printf ' %11s' "$f/ext4"; done
	for f in "${FSL[@]}"; do [ "$f" = ext4 ] || [ "$f" = kaon ] || printf ' %11s' "kaon/$f"; done
	echo
	for p in "${PHASES[@]}" bw md score; do
		case $p in bw) u=GiB/s ;; md) u=kIOPS ;; score) u="" ;; ior-*) u=GiB/s ;; *) u=kIOPS ;; esac
		label=$p
		case $p in bw) label="[SCORE] bandwidth" ;; md) label="[SCORE] metadata" ;; score) label="[SCORE] total" ;; esac
		printf '%-20s %-6s' "$label" "$u"
		declare -A M=()
		for f in "${FSL[@]}"; do M[$f]=$(median ${R[${p}_$f]}); printf ' %11.4f' "${M[$f]}"; done
		ratio() { if [ -z "${M[$1]:-}" ] || [ -z "${M[$2]:-}" ] || [ "$(calc "${M[$2]} == 0")" = 1.000000 ]; then printf ' %11s' -; else printf ' %11.3f' "$(calc "${M[$1]} / ${M[$2]}")"; fi; }
		for f in "${FSL[@]}"; do [ "$f" = ext4 ] || ratio "$f" ext4; done
		for f in "${FSL[@]}"; do [ "$f" = ext4 ] || [ "$f" = kaon ] || ratio kaon "$f"; done
		echo
	done
	echo "(ratios of rates: >1 faster; the scores are geometric means as IO500's: bandwidth of the 4 ior phases, metadata of the 8 others, total of both)"
	for k in "${!R[@]}"; do echo "raw $k:${R[$k]}"; done | sort
} | tee "$OUT/io500.txt"
