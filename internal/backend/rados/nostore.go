//go:build !ceph

package rados

import (
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Available says whether this binary can serve RADOS filesystems: not
// without the ceph build tag.
const Available = false

// Options are a storage server's defaults for its RADOS filesystems.
type Options struct {
	User    string
	Conf    string
	Timeout time.Duration
}

// Open fails: RADOS support is not compiled in.
func Open(place string, _ Options) (backend.Store, error) {
	return nil, kerr.New(kerr.Unsupported, "open", place, "RADOS support is not compiled in (build with -tags ceph, librados-dev installed)")
}

// Health is "": there is no librados to ask.
func Health(conf, user, fsid string, timeout time.Duration) string { return "" }
