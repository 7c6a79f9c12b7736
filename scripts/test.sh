#!/usr/bin/env bash
# The one test command (README.md): installs what the tests need, then runs
# unit tests under the race detector and the integration tests, which start
# the real kaon binary and drive it with real clients and real FUSE mounts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# Two builds: the plain one (no C library, as the README builds it) and
# -tags ceph (RADOS support through librados).
unformatted=$(gofmt -l cmd internal integration bench)
if [ -n "$unformatted" ]; then echo "gofmt: not formatted: $unformatted" >&2; exit 1; fi
go vet ./...
go vet -tags ceph ./...
# staticcheck, pinned (2026.2.2; the module proxy resolves the version,
# the Go build cache keeps it after the first run).
staticcheck="go run honnef.co/go/tools/cmd/staticcheck@v0.8.2"
$staticcheck ./...
$staticcheck -tags ceph ./...
go build -tags ceph -o /dev/null ./cmd/kaon
unit=$(go list ./... | grep -v /integration/)
go test -race -count=1 -timeout 30m $unit
go test -count=1 -p 1 -timeout 40m $(go list ./integration/... | grep -v /integration/ceph)
# The chaos suite, 20 s of faults (1.5 minutes in all; a random seed,
# printed, replays a failure: scripts/chaos.sh --seconds 20 --seed S).
scripts/chaos.sh --seconds 20

# The Ceph tests share one cluster (started once, purged at the end):
# the RADOS backend's suite and Kaon on CephFS and RADOS.
ceph_dir=$(mktemp -d /var/tmp/kaon-ceph-ci.XXXXXX)
trap 'scripts/ceph-dev.sh purge "$ceph_dir" >/dev/null 2>&1 || true' EXIT
scripts/ceph-dev.sh start "$ceph_dir" >/dev/null
export KAON_CEPH_DIR=$ceph_dir
go test -race -count=1 -tags ceph -timeout 20m ./internal/backend/rados/
go test -count=1 -p 1 -tags ceph -timeout 30m ./integration/ceph/...
