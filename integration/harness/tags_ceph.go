//go:build ceph

package harness

// buildTags: a test binary built with -tags ceph tests a kaon built so.
const buildTags = "ceph"
