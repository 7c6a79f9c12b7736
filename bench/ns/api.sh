#!/usr/bin/env bash
# The namespace through its API on the session channel (the channel the
# mount's session uses: one WebSocket, requests framed on it) against the
# namespace in process, in one run, alternating, ROUNDS times each:
#
#   in-process   kaon bench ns (durable commits, as the server's)
#   old          OLD's kaon up + OLD's kaon bench ns --session
#   new          this tree's kaon up + kaon bench ns --session (batched)
#   unbatched    this tree's, --session --unbatched (a frame per request)
#
#   bench/ns/api.sh                       # 20 000 files in 100 dirs, 3 rounds
#   OLD=/tmp/kaon-main ROUNDS=5 bench/ns/api.sh
#
# OLD (optional) is a kaon binary to compare with (main's). The null
# phase (a round trip that does nothing) is the channel's floor: no
# request on it can go faster. Prints each run's table, then the medians
# and the ratios to in-process (creates, stats) and to the null floor.
set -euo pipefail

FILES=${FILES:-20000}
DIRS=${DIRS:-100}
WORKERS=${WORKERS:-32}
ROUNDS=${ROUNDS:-3}
OLD=${OLD:-}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kaon-ns-api.XXXXXX")
pids=()

cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

median() { python3 -c "import sys,statistics; v=[float(x) for x in sys.argv[1:]]; print('%.0f' % statistics.median(v) if v else '-')" "$@"; }
ratio() { python3 -c "import sys; a, b = sys.argv[1:]; print('%.3f' % (float(a)/float(b)) if '-' not in (a, b) else '-')" "$1" "$2"; }

(cd "$REPO" && go build -o "$WORK/kaon" ./cmd/kaon)
# up BIN NAME: a server of its own (one filesystem) in $WORK/NAME.
up() {
	mkdir -p "$WORK/$2"
	"$1" up --data "$WORK/$2" --http 127.0.0.1:0 --xrootd 127.0.0.1:0 --fs 1 >"$WORK/$2.log" 2>&1 &
	pids+=($!)
	pid[$2]=$!
	for _ in $(seq 100); do
		[ -s "$WORK/$2/endpoints.json" ] && return
		sleep 0.1
	done
	echo "kaon up ($2) did not start within 10 s:" >&2
	cat "$WORK/$2.log" >&2
	exit 1
}
# cpu PID: its user+system CPU so far, in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
declare -A pid
rows=(in-process new unbatched)
up "$WORK/kaon" new
if [ -n "$OLD" ]; then
	up "$OLD" old
	rows=(in-process old new unbatched)
fi
echo "kaon bench ns: $FILES files in $DIRS directories, $WORKERS workers, $ROUNDS rounds; old: ${OLD:-none}"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

declare -A rate
for ((r = 1; r <= ROUNDS; r++)); do
	order=("${rows[@]}")
	if ((r % 2 == 0)); then # alternate the order
		order=()
		for ((i = ${#rows[@]} - 1; i >= 0; i--)); do order+=("${rows[i]}"); done
	fi
	for row in "${order[@]}"; do
		out="$WORK/$row.$r.out"
		args=(bench ns --files "$FILES" --dirs "$DIRS" --workers "$WORKERS")
		bin="$WORK/kaon"
		case $row in
		old) bin=$OLD args+=(--data "$WORK/old" --session) ;;
		new) args+=(--data "$WORK/new" --session) ;;
		unbatched) args+=(--data "$WORK/new" --session --unbatched) ;;
		esac
		load=$(cut -d' ' -f1 /proc/loadavg)
		server=${pid[${row/unbatched/new}]:-}
		s0=$([ -n "$server" ] && cpu "$server" || echo 0)
		/usr/bin/time -f "%U %S" -o "$WORK/time" "$bin" "${args[@]}" >"$out" 2>&1
		s1=$([ -n "$server" ] && cpu "$server" || echo 0)
		echo "--- round $r, $row (load $load)"
		cat "$out"
		python3 -c "import sys; u,s=open('$WORK/time').read().split()[-2:]; print('CPU: client %.2f s, server %.2f s' % (float(u)+float(s), ($s1-$s0)/$(getconf CLK_TCK)))"
		for phase in create stat null; do
			v=$(awk -v p="$phase" '$1 == p {print $4}' "$out")
			[ -n "$v" ] && rate[$row.$phase]+=" $v"
		done
	done
done

echo
echo "medians of $ROUNDS rounds (ops/s), ratio to in-process and to the channel's null floor"
printf "%-11s %8s %8s %8s %9s %9s %11s\n" row creates stats nulls create/in stat/in stat/null
ic=$(median ${rate[in-process.create]}) is=$(median ${rate[in-process.stat]})
for row in "${rows[@]}"; do
	c=$(median ${rate[$row.create]:-}) s=$(median ${rate[$row.stat]:-}) n=$(median ${rate[$row.null]:-})
	printf "%-11s %8s %8s %8s %9s %9s %11s\n" "$row" "$c" "$s" "$n" "$(ratio "$c" "$ic")" "$(ratio "$s" "$is")" "$(ratio "$s" "$n")"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
