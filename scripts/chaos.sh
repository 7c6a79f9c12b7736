#!/usr/bin/env bash
# The chaos suite (integration/chaos): clients write, update, rename,
# delete and read over HTTP and root:// while faults are injected at
# random (kill -9 of namespace servers, storage servers and etcd members,
# SIGSTOP of the active namespace server beyond its lease, a partition of
# one from etcd (etcd runs in a network namespace the test makes: root
# only), a slow disk, a disk returning EIO that is then rebuilt); after
# healing, a checker compares what the clients were told with what is
# stored, and that no two namespace servers accepted writes in one term.
#
#   scripts/chaos.sh [--seconds N] [--seed S] [--clients C] [--sabotage]
#
# --sabotage removes one acknowledged file behind the clients' backs
# before the check: the checker must then say lost=1 (a check of the
# checker).
#
# Ends with one line containing lost=N (the checker's violations); exit
# status non-zero unless lost=0. The seed it prints replays the clients'
# and the scheduler's choices (not the machine's timings).
set -euo pipefail

SECONDS_=60
SEED=0
CLIENTS=4
SABOTAGE=false
while [ $# -gt 0 ]; do
	case "$1" in
	--seconds) SECONDS_=$2; shift 2 ;;
	--seed) SEED=$2; shift 2 ;;
	--clients) CLIENTS=$2; shift 2 ;;
	--sabotage) SABOTAGE=true; shift ;;
	*) echo "usage: $0 [--seconds N] [--seed S] [--clients C] [--sabotage]" >&2; exit 2 ;;
	esac
done
if [ "$SEED" = 0 ]; then SEED=$(( ($(date +%s%N) % 1000000000) + 1 )); fi
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
go test -count=1 -v -timeout $((SECONDS_ + 900))s -run '^TestChaos$' ./integration/chaos/ \
	-args -chaos.seconds "$SECONDS_" -chaos.seed "$SEED" -chaos.clients "$CLIENTS" -chaos.sabotage="$SABOTAGE" 2>&1 | tee "$out" || status=$?
line=$(grep -E '^chaos: .*lost=[0-9]+' "$out" | tail -1 || true)
if [ -z "$line" ]; then
	echo "chaos: seed=$SEED lost=unknown (the suite did not reach its check; see above)"
	exit 1
fi
echo "$line"
case "$line" in
*" lost=0"*) exit "$status" ;;
*) exit 1 ;;
esac
