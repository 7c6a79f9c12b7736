//go:build !ceph

package harness

// buildTags: the kaon under test is built as the test binary was.
const buildTags = ""
