package nsserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestCommitUpdateEvent: a committed update reaches clients as a
// "modified" event carrying the file's new data version (JSON
// data_version), size and mtime, and the file's attributes show the
// version and no checksum of the old content.
func TestCommitUpdateEvent(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 2, 1)
	_ = s.Mkdir(ctx, root, "/r", 0o755, false)
	_ = s.SetXAttr(ctx, root, "/r", nsapi.AttrLayout, "replica:2")
	g, err := s.Open(ctx, root, "/r/f", nsapi.OpenRequest{Write: true, Create: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.key.Verify(g.Token, time.Now(), capability.Access{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, message.Commit{Fid: c.Fid, Size: 5, Checksums: map[string]string{"adler32": "01"}}); err != nil {
		t.Fatal(err)
	}
	var locs []uint32
	for _, t := range c.Targets {
		locs = append(locs, t.FsID)
	}
	rev := s.ns.Revision()
	v, err := s.CommitUpdate(ctx, message.UpdateCommit{Fid: c.Fid, Base: 0, Tag: 7, Size: 9, Locations: locs})
	if err != nil || v.DataVersion != 1 || v.Size != 9 {
		t.Fatalf("commit of an update: %+v %v", v, err)
	}
	evs, err := s.ns.Changes(ctx, rev, 10)
	if err != nil {
		t.Fatal(err)
	}
	out := eventsOf(evs)
	if len(out) != 1 || out[0].Kind != nsapi.EventModified || out[0].DataVersion != 1 || out[0].Size != 9 || out[0].MTime == 0 || out[0].Name != "f" {
		t.Fatalf("events of an update: %+v", out)
	}
	b, _ := json.Marshal(out[0])
	if !strings.Contains(string(b), `"data_version":1`) || !strings.Contains(string(b), `"kind":"modified"`) {
		t.Fatalf("the modified event on the wire: %s", b)
	}
	e, err := s.Stat(ctx, root, "/r/f")
	if err != nil || e.DataVersion != 1 || e.Size != 9 || e.Checksums["adler32"] != "" {
		t.Fatalf("the file after the update: %+v %v", e, err)
	}
}
