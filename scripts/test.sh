#!/usr/bin/env bash
# The one test command (README.md): installs what the tests need, then runs
# unit tests under the race detector and the integration tests, which start
# the real kaon binary and drive it with real clients and real FUSE mounts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
go vet ./...
unit=$(go list ./... | grep -v /integration/)
go test -race -count=1 -timeout 30m $unit
go test -count=1 -p 1 -timeout 40m ./integration/...
