#!/usr/bin/env bash
# Client sessions against one `kaon up` (issue 22's figures):
#   - `kaon bench locks`: lock acquire+release round trips of one session
#     (median, p99; goal median <= 0.3 ms on loopback);
#   - `kaon bench sessions` at N sessions with 10 leases each (default
#     10 000 and 100 000): the namespace server's RSS and CPU while they
#     heartbeat, and the time for a creation to reach the 1 000 sessions
#     subscribed to its directory, with and without broadcast suppression
#     (goals: 100 000 sessions under 2 GiB RSS; reach < 1 s).
# A fresh server per N. PNGs of the latency distributions go to OUT
# (default: a temp dir, printed). KAON (binary) defaults to a fresh build.
#
#   bench/sessions/bench.sh
#   SESSIONS="10000" ROUNDS=5 bench/sessions/bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
SESSIONS=${SESSIONS:-10000 100000}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-$(mktemp -d /tmp/kaon-sessions-bench.XXXXXX)}
KAON=${KAON:-}
if [ -z "$KAON" ]; then
	KAON=$(mktemp -d)/kaon
	go build -o "$KAON" ./cmd/kaon
fi
pid=
dir=
up() {
	dir=$(mktemp -d /tmp/kaon-sessbench.XXXXXX)
	"$KAON" up --data "$dir/d" --http 127.0.0.1:0 --xrootd "" >"$dir/log" 2>&1 &
	pid=$!
	for _ in $(seq 300); do [ -f "$dir/d/endpoints.json" ] && return; sleep 0.1; done
	echo "kaon up did not start:"; cat "$dir/log"; exit 1
}
down() { kill "$pid"; wait "$pid" || true; rm -rf "$dir"; }
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; [ -n "$dir" ] && rm -rf "$dir"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
up
echo "== lock round trips"
"$KAON" bench locks --data "$dir/d" --rounds "$ROUNDS" --plot "$OUT/locks.png"
down
for n in $SESSIONS; do
	up
	echo "== $n sessions"
	"$KAON" bench sessions --data "$dir/d" --sessions "$n" --leases-per-session 10 --plot "$OUT/reach-$n.png"
	down
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); plots in $OUT"
