package storage

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Heartbeats list the uploads this server writes, from the claim until
// the commit or the abort, so the namespace keeps exactly those pending
// (nsserver's sweeper aborts the others).
func TestHeartbeatsReportUploadsBeingWritten(t *testing.T) {
	ctx := context.Background()
	s, ns, key, _ := newServer(t, 1)
	reported := func() []uint64 {
		t.Helper()
		if _, _, err := s.beat(ctx); err != nil {
			t.Fatal(err)
		}
		ns.mu.Lock()
		defer ns.mu.Unlock()
		return ns.uploads
	}
	c1, c2 := writeCap(7, "plain", 1), writeCap(8, "plain", 1)
	u1, err := s.NewUpload(ctx, c1, key.Sign(c1), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	u2, err := s.NewUpload(ctx, c2, key.Sign(c2), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := reported(); !slices.Equal(got, []uint64{7, 8}) {
		t.Fatalf("heartbeat during two uploads reports %v, want [7 8]", got)
	}
	if _, err := u1.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := u1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reported(); !slices.Equal(got, []uint64{8}) {
		t.Fatalf("heartbeat after a commit reports %v, want [8]", got)
	}
	u2.Abort(ctx)
	if got := reported(); len(got) != 0 {
		t.Fatalf("heartbeat after the abort reports %v, want none", got)
	}
}
