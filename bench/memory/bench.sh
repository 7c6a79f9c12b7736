#!/usr/bin/env bash
# Peak memory of the all-in-one server under many parallel streams: runs
# `kaon up` and `kaon bench stream` with 64 and 256 parallel 8 MiB streams
# (plain and ec:4+2), and prints the table rows with the server's peak RSS.
# STREAM_MEMORY (MiB) sets the server's stream budget (default: the
# server's default); KAON (binary) defaults to a fresh build.
set -euo pipefail
cd "$(dirname "$0")/../.."
KAON=${KAON:-}
if [ -z "$KAON" ]; then
	KAON=$(mktemp -d)/kaon
	go build -o "$KAON" ./cmd/kaon
fi
extra=()
[ -n "${STREAM_MEMORY:-}" ] && extra=(--stream-memory "$STREAM_MEMORY")
for n in ${STREAMS:-64 256}; do
	dir=$(mktemp -d /tmp/kaon-membench.XXXXXX)
	"$KAON" up --data "$dir/d" --http 127.0.0.1:0 --xrootd "" "${extra[@]}" >"$dir/log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do [ -f "$dir/d/endpoints.json" ] && break; sleep 0.1; done
	echo "== $n parallel streams x 8 MiB"
	"$KAON" bench stream --data "$dir/d" --streams "$n" --size 8M --layouts plain,ec:4+2 | grep -E 'layout|plain|ec:'
	kill "$pid"; wait "$pid" || true
	rm -rf "$dir"
done
