#!/usr/bin/env bash
# kaon mount beside its peers, in one run: `kaon mount` (two mounts of one
# `kaon up`), `kaon cfsd` over a local directory, MooseFS (two mfsmounts),
# SeaweedFS (two `weed mount`s), ceph-fuse (two mounts of the
# scripts/ceph-dev.sh cluster) and the ext4 directory below them all.
#
#   sudo bench/mount/bench.sh                     # ROUNDS=3 FILES=10000 DD_MB=1024 FIO_MB=256 VIS=50
#   ROUNDS=1 FILES=500 DD_MB=64 FIO_MB=8 VIS=10 UNTAR=src/net bench/mount/bench.sh   # a few minutes
#   FS="kaon ext4" bench/mount/bench.sh           # a subset (names: kaon cfsd mfs weed ceph ext4)
#   WORKLOADS="untar lsc lsw findc findw"         # a subset of: ddw ddr small fio untar lsc lsw findc findw create1 create10 viscreate vismodify
#   CEPH_DIR=/var/tmp/c bench/mount/bench.sh      # an existing ceph-dev.sh cluster (else one is made and purged)
#   KAON=BINARY WEED=BINARY OUT=DIR               # binaries (built when absent), where table and PNGs go
#
# Workloads, each run on every file system in turn; the order rotates
# every round so no file system always goes first; medians over ROUNDS:
#   dd write DD_MB MiB (bs=1M, conv=fsync), dd read after drop_caches  MB/s
#   SMALL writes of SMALL_BS bytes (dd, conv=fsync: close and fsync in)  writes/s
#   fio 4 KiB random writes over FIO_MB MiB (psync, end_fsync)          IOPS, fsync included
#   untar of the Go source tree ($(go env GOROOT)/$UNTAR as a tar, -m)  entries/s
#   ls -lR and find -ls of that tree, cold (drop_caches) then warm      s
#   FILES creates in one directory, and in 10 directories in parallel   files/s
#   a file created (or rewritten) in one mount seen in the other        ms, median and p99
# "cold" drops the kernel's caches only: what a daemon caches in its own
# memory (kaon mount's metadata cache, ceph-fuse's, weed's meta cache,
# mfsmount's) stays, alike for all. MooseFS runs in a network namespace of
# its own (its master and chunkserver refuse 127.0.0.1), daemons and
# mfsmount started with nsenter. SeaweedFS's binary is built once by
# bench/mount/weed-build.sh (about 12 minutes on 2 cores) and cached.
# Writes OUT/table.txt and OUT/*.png: visibility latency between two
# mounts, per-op latency of creates and fio's 4 KiB writes. Root.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${ROUNDS:-3} FILES=${FILES:-10000} DD_MB=${DD_MB:-1024} FIO_MB=${FIO_MB:-256} VIS=${VIS:-50}
SMALL=${SMALL:-65536} SMALL_BS=${SMALL_BS:-512}
UNTAR=${UNTAR:-src} # the tree untarred and listed, relative to $(go env GOROOT)
FS=${FS:-kaon cfsd mfs weed ceph ext4}
OUT=${OUT:-$repo/bench/out/mount}
. "$repo/bench/mount/peers.sh"
mkdir -p "$OUT" "$W/lat"
MBENCH=$W/mbench
go -C "$repo" build -o "$MBENCH" ./bench/mount/mbench

TAR=$W/gosrc.tar
tar -C "$(go env GOROOT)" -cf "$TAR" "$UNTAR"
NFILES=$(tar -tf "$TAR" | wc -l)

now() { date +%s.%N; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
calc() { awk "BEGIN{printf \"%.6f\", $*}"; }
timeit() { local t0 t1; t0=$(now); "$@" >/dev/null 2>"$W/err" || return 1; t1=$(now); calc "$t1 - $t0"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
declare -A R
add() { R[$1]="${R[$1]:-} $2"; }

# run WORKLOAD FS: one measurement, added to R[WORKLOAD_FS].
run() {
	local w=$1 f=$2 d=${D[$2]} t
	case $w in
	ddw) drop; t=$(timeit dd if=/dev/zero of="$d/dd.bin" bs=1M count="$DD_MB" conv=fsync) || return 1; add "ddw_$f" "$(calc "$DD_MB * 1.048576 / $t")" ;;
	ddr) drop; t=$(timeit dd if="$d/dd.bin" of=/dev/null bs=1M) || return 1; add "ddr_$f" "$(calc "$DD_MB * 1.048576 / $t")"; rm -f "$d/dd.bin" ;;
	small) t=$(timeit dd if=/dev/zero of="$d/small.bin" bs="$SMALL_BS" count="$SMALL" conv=fsync) || return 1; add "small_$f" "$(calc "$SMALL / $t")"; rm -f "$d/small.bin" ;;
	fio)
		rm -f "$W"/lat/fio_"$f"_*
		local t0 t1 ios
		t0=$(now)
		fio --name=rw --filename="$d/fio.bin" --rw=randwrite --bs=4k --size="${FIO_MB}M" --ioengine=psync \
			--end_fsync=1 --output-format=json --write_lat_log="$W/lat/fio_$f" --log_avg_msec=0 >"$W/fio.json" 2>"$W/err" || return 1
		t1=$(now)
		ios=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["write"]["total_ios"])' "$W/fio.json")
		add "fio_$f" "$(calc "$ios / ($t1 - $t0)")"
		# per-op latencies (ns) of the last round, for the plot
		awk -F', *' '{print $2}' "$W"/lat/fio_"$f"_clat.*.log >"$W/lat/fio-$f" 2>/dev/null || true
		rm -f "$d/fio.bin" "$W"/lat/fio_"$f"_* ;;
	untar) rm -rf "${d:?}/${UNTAR%%/*}"; drop; t=$(timeit tar -C "$d" -m -xf "$TAR") || return 1; add "untar_$f" "$(calc "$NFILES / $t")" ;;
	lsc) drop; t=$(timeit ls -lR "$d/$UNTAR") || return 1; add "lsc_$f" "$t" ;;
	lsw) t=$(timeit ls -lR "$d/$UNTAR") || return 1; add "lsw_$f" "$t" ;;
	findc) drop; t=$(timeit find "$d/$UNTAR" -ls) || return 1; add "findc_$f" "$t" ;;
	findw) t=$(timeit find "$d/$UNTAR" -ls) || return 1; add "findw_$f" "$t"; rm -rf "${d:?}/${UNTAR%%/*}" ;;
	create1 | create10)
		local n=${w#create}
		rm -f "$W/lat/$w-$f"
		t=$("$MBENCH" creates -dir "$d/$w" -files "$FILES" -dirs "$n" -lat "$W/lat/$w-$f" 2>"$W/err") || return 1
		add "${w}_$f" "$t"
		rm -rf "$d/$w" ;;
	viscreate | vismodify)
		[ -n "${D2[$f]:-}" ] || return 0
		rm -f "$W/lat/$w-$f"
		mkdir -p "$d/$w"
		local r
		r=$("$MBENCH" vis -a "$d/$w" -b "${D2[$f]}/$w" -n "$VIS" -kind "${w#vis}" -lat "$W/lat/$w-$f" 2>"$W/err") || return 1
		add "${w}_$f" "${r% *}"; add "${w}99_$f" "${r#* }"
		rm -rf "$d/$w" ;;
	esac
}

read -ra WL <<<"${WORKLOADS:-ddw ddr small fio untar lsc lsw findc findw create1 create10 viscreate vismodify}"
[ "$DD_MB" -gt 0 ] || WL=("${WL[@]/dd[wr]/}")
LOADS=() FAILS=()
for r in $(seq 1 "$ROUNDS"); do
	n=${#FSL[@]} k=$(((r - 1) % n))
	order=("${FSL[@]:k}" "${FSL[@]:0:k}")
	log "round $r of $ROUNDS, order ${order[*]}"
	for w in "${WL[@]}"; do
		log "$w"
		for f in "${order[@]}"; do
			# a failure is reported and counted; the run goes on with the rest
			run "$w" "$f" || { log "$w on $f FAILED: $(tail -c 300 "$W/err")"; FAILS+=("round $r: $w on $f: $(tail -c 200 "$W/err" | tr '\n' ' ')"); }
		done
	done
	LOADS+=("$(cut -d' ' -f1-3 /proc/loadavg)")
done

# ---- the table --------------------------------------------------------
{
	echo "kaon mount vs peers: $ROUNDS rounds (order rotated), medians; $(uname -r), $(nproc) cores; $(date -u +%FT%TZ)"
	echo "load average after each round: ${LOADS[*]}"
	echo "ext4: $(findmnt -n -o SOURCE,FSTYPE -T "$W") ; untar: $NFILES entries of \$GOROOT/$UNTAR ; creates: $FILES ; dd: $DD_MB MiB ; fio: 4 KiB randwrite over $FIO_MB MiB ; visibility: $VIS changes"
	echo "kaon $("$KAON" version 2>/dev/null | head -1) ; weed ${WEED:+$(basename "$WEED")} ; $(mfsmaster -v 2>/dev/null | head -1) ; $(ceph-fuse --version 2>/dev/null | cut -d' ' -f1-3)"
	rows=(ddw "dd write" MB/s hi ddr "dd read" MB/s hi small "small writes" writes/s hi fio "fio 4k randwrite" IOPS hi untar "untar" entries/s hi
		lsc "ls -lR cold" s lo lsw "ls -lR warm" s lo findc "find -ls cold" s lo findw "find -ls warm" s lo
		create1 "creates 1 dir" files/s hi create10 "creates 10 dirs" files/s hi
		viscreate "seen: create p50" ms lo viscreate99 "seen: create p99" ms lo
		vismodify "seen: modify p50" ms lo vismodify99 "seen: modify p99" ms lo)
	printf '\n%-22s %-10s' "medians" unit
	for f in "${FSL[@]}"; do printf ' %10s' "$f"; done
	echo
	declare -A MED
	for ((i = 0; i < ${#rows[@]}; i += 4)); do
		k=${rows[i]}
		any=""
		for f in "${FSL[@]}"; do any+=${R[${k}_$f]:-}; done
		[ -n "$any" ] || continue
		printf '%-22s %-10s' "${rows[i + 1]}" "${rows[i + 2]}"
		for f in "${FSL[@]}"; do
			if [ -n "${R[${k}_$f]:-}" ]; then MED[${k}_$f]=$(median ${R[${k}_$f]}); printf ' %10.2f' "${MED[${k}_$f]}"; else printf ' %10s' -; fi
		done
		echo
	done
	# speed(a, b): how many times faster a is than b (>1: a better)
	speed() { local a=${MED[${1}_$2]:-} b=${MED[${1}_$3]:-}; [ -n "$a" ] && [ -n "$b" ] || { echo -; return; }
		if [ "$4" = hi ]; then calc "$a / $b"; else calc "$b / $a"; fi; }
	for ref in ext4 kaon; do
		[ -n "${D[$ref]:-}" ] || continue
		if [ $ref = ext4 ]; then printf '\n%-33s' "speed relative to ext4 (>1 faster)"; else printf '\n%-33s' "kaon's speed vs (>1 kaon faster)"; fi
		for f in "${FSL[@]}"; do [ $f = $ref ] || printf ' %10s' "$f"; done
		echo
		for ((i = 0; i < ${#rows[@]}; i += 4)); do
			k=${rows[i]}
			[ -n "${MED[${k}_$ref]:-}" ] || continue
			printf '%-33s' "${rows[i + 1]}"
			for f in "${FSL[@]}"; do
				[ $f = $ref ] && continue
				if [ $ref = ext4 ]; then s=$(speed "$k" "$f" ext4 "${rows[i + 3]}"); else s=$(speed "$k" kaon "$f" "${rows[i + 3]}"); fi
				[ "$s" = - ] && printf ' %10s' - || printf ' %10.3f' "$s"
			done
			echo
		done
	done
	echo
	for x in "${FAILS[@]}"; do echo "FAILED $x"; done
	echo "cold = after drop_caches (kernel caches only; daemons keep their own). IOPS include the final fsync."
	for k in "${!R[@]}"; do echo "raw $k:${R[$k]}"; done | sort
} | tee "$OUT/table.txt"

# ---- the plots (latencies of the last round) ---------------------------
series() { local p=$1 s=(); for f in "${FSL[@]}"; do s+=("$f=$W/lat/$p-$f"); done; echo "${s[@]}"; }
"$MBENCH" plot -o "$OUT/visibility-create.png" -title "a file created in one mount, seen in the other ($VIS changes)" $(series viscreate)
"$MBENCH" plot -o "$OUT/visibility-modify.png" -title "a file rewritten in one mount, new content read in the other ($VIS changes)" $(series vismodify)
"$MBENCH" plot -o "$OUT/create-1dir.png" -title "create+close latency, $FILES files in one directory" $(series create1)
"$MBENCH" plot -o "$OUT/create-10dirs.png" -title "create+close latency, $FILES files in 10 directories in parallel" $(series create10)
"$MBENCH" plot -o "$OUT/fio-4k-randwrite.png" -title "fio 4 KiB random write latency (psync), $FIO_MB MiB" $(series fio)
log "done: $OUT/table.txt and $OUT/*.png"
