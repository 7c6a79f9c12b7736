#!/usr/bin/env bash
# Build weed from a pinned go mod download copy (go install refuses: replace directives).
set -euo pipefail
V=${SEAWEED_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
OUT=${1:-/work/cache/seaweedfs/weed-$V}
[ -x "$OUT" ] && { echo "$OUT"; exit 0; }
dir=$(GOFLAGS=-mod=mod go mod download -json github.com/seaweedfs/seaweedfs@$V | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
tmp=$(mktemp -d); cp -r "$dir"/. "$tmp"; chmod -R u+w "$tmp"
(cd "$tmp" && GOFLAGS=-mod=mod go build -o "$OUT.tmp" ./weed) && mv "$OUT.tmp" "$OUT"
rm -rf "$tmp"; echo "$OUT"
