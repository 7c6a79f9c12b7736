package namespace

import (
	"slices"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// deletions returns the stripes queued on fsid that are due now.
func deletions(t *testing.T, ns *Namespace, fsid uint32) []Deletion {
	t.Helper()
	ds, err := ns.Deletions(fsid, 100)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestMoveSwitch: a move switches the stripe's location in one batch;
// the old stripe is queued for deletion, due only after the grace given;
// the target is refused while it holds or still has queued a stripe of
// the file, or a move of it is in flight.
func TestMoveSwitch(t *testing.T) {
	now := time.Unix(1000, 0)
	ns, err := Open(newNS(t).eng, Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ns.Mkdir(Root, "/d", 0o755, false)
	ns.SetXAttr(Root, "/d", nsapi.AttrLayout, "replica:2")
	f := create(t, ns, "/d/f", 100) // on fs 1 and 2
	m := Move{Fid: f.ID, Stripe: 1, From: 2, To: 5}
	if _, err := ns.BeginMove(Move{Fid: f.ID, Stripe: 1, From: 2, To: 1}); !kerr.Is(err, kerr.Exists) {
		t.Fatalf("move onto a filesystem holding a stripe of the file: %v", err)
	}
	if _, err := ns.BeginMove(Move{Fid: f.ID, Stripe: 1, From: 3, To: 5}); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("move of a stripe that is not there: %v", err)
	}
	if _, err := ns.BeginMove(m); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.BeginMove(Move{Fid: f.ID, Stripe: 0, From: 1, To: 5}); !kerr.Is(err, kerr.Busy) {
		t.Fatalf("second move of the file to the same target: %v", err)
	}
	if ms, _ := ns.PendingMoves(); len(ms) != 1 || ms[0].From != 2 || ms[0].To != 5 || ms[0].Started != now.UnixNano() {
		t.Fatalf("pending moves: %+v", ms)
	}
	switched, err := ns.FinishMove(m, true, now.Add(time.Minute))
	if err != nil || !switched {
		t.Fatalf("FinishMove: %v %v", switched, err)
	}
	g, _ := ns.Stat(Root, "/d/f")
	if !slices.Equal(g.Locations, []uint32{1, 5}) || g.ID != f.ID {
		t.Fatalf("locations after the switch: %v (id %d)", g.Locations, g.ID)
	}
	if ms, _ := ns.PendingMoves(); len(ms) != 0 {
		t.Fatalf("move still pending: %+v", ms)
	}
	if ds := deletions(t, ns, 2); len(ds) != 0 {
		t.Fatalf("old stripe deleted before its grace ended: %v", ds)
	}
	// Back onto fs 2 while its old stripe waits for deletion: refused.
	if _, err := ns.BeginMove(Move{Fid: f.ID, Stripe: 1, From: 5, To: 2}); !kerr.Is(err, kerr.Busy) {
		t.Fatalf("move onto a filesystem with a queued stripe of the file: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if ds := deletions(t, ns, 2); len(ds) != 1 || ds[0] != (Deletion{FsID: 2, Fid: f.ID, Stripe: 1}) {
		t.Fatalf("old stripe not queued after its grace: %v", ds)
	}
	ns.AckDeletions(deletions(t, ns, 2))
	if _, err := ns.BeginMove(Move{Fid: f.ID, Stripe: 1, From: 5, To: 2}); err != nil {
		t.Fatalf("move back once the old stripe is gone: %v", err)
	}
}

// TestMoveDropped: a copy whose file was removed, rewritten or changed
// meanwhile, or which failed, is never registered: it is queued for
// deletion at once and the file keeps its locations.
func TestMoveDropped(t *testing.T) {
	ns := newNS(t)
	for _, tc := range []struct {
		name   string
		copied bool
		change func(f *Inode)
	}{
		{"copy failed", false, func(*Inode) {}},
		{"removed", true, func(*Inode) { ns.Remove(Root, "/f", RemoveOptions{}) }},
		{"rewritten", true, func(*Inode) { create(t, ns, "/f", 7) }},
		{"stripe moved elsewhere", true, func(f *Inode) {
			m := Move{Fid: f.ID, Stripe: 0, From: 1, To: 3}
			ns.BeginMove(m)
			ns.FinishMove(m, true, time.Time{})
		}},
	} {
		f := create(t, ns, "/f", 10)
		m := Move{Fid: f.ID, Stripe: 0, From: 1, To: 4}
		if _, err := ns.BeginMove(m); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tc.change(f)
		switched, err := ns.FinishMove(m, tc.copied, time.Time{})
		if err != nil || switched {
			t.Fatalf("%s: switched=%v %v", tc.name, switched, err)
		}
		if ds := deletions(t, ns, 4); !slices.Contains(ds, Deletion{FsID: 4, Fid: f.ID, Stripe: 0}) {
			t.Fatalf("%s: the copy is not queued for deletion: %v", tc.name, ds)
		}
		if g, err := ns.Stat(Root, "/f"); err == nil && slices.Contains(g.Locations, 4) {
			t.Fatalf("%s: the dropped copy is registered: %v", tc.name, g.Locations)
		}
		ns.AckDeletions(deletions(t, ns, 4))
		ns.Remove(Root, "/f", RemoveOptions{})
	}
}

// TestAbortMoves: at start every move in flight is rolled back: its copy
// is queued for deletion, the file keeps its stripe where it was.
func TestAbortMoves(t *testing.T) {
	ns := newNS(t)
	f := create(t, ns, "/f", 10)
	ns.BeginMove(Move{Fid: f.ID, Stripe: 0, From: 1, To: 6})
	n, err := ns.AbortMoves()
	if err != nil || n != 1 {
		t.Fatalf("AbortMoves: %d %v", n, err)
	}
	if ms, _ := ns.PendingMoves(); len(ms) != 0 {
		t.Fatalf("moves left: %v", ms)
	}
	if ds := deletions(t, ns, 6); len(ds) != 1 {
		t.Fatalf("copy not queued: %v", ds)
	}
	if g, _ := ns.Stat(Root, "/f"); !slices.Equal(g.Locations, []uint32{1}) {
		t.Fatalf("locations: %v", g.Locations)
	}
	if _, err := ns.FinishMove(Move{Fid: f.ID, Stripe: 0, From: 1, To: 6}, true, time.Time{}); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("finishing a rolled-back move: %v", err)
	}
}

// TestConvert: a conversion's staged copy is invisible, cannot be
// claimed or committed as an upload, and switches in keeping the file's
// name, owner, attributes and checksums with a new id, layout and
// locations; a file rewritten meanwhile or a copy with other bytes is
// dropped.
func TestConvert(t *testing.T) {
	ns := newNS(t)
	f := create(t, ns, "/f", 10)
	ns.SetXAttr(Root, "/f", "user.x", "1")
	ec, _ := layout.Parse("ec:2+1")
	p, err := ns.BeginConvert(f.ID, ec, []uint32{4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.ClaimUpload(p.ID); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("claiming a conversion's copy: %v", err)
	}
	if _, err := ns.Commit(p.ID, 10, map[string]string{"adler32": "0000abcd"}); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("committing a conversion's copy: %v", err)
	}
	if err := ns.FinishConvert(f.ID, p.ID, 10, map[string]string{"adler32": "0000abcd", "crc32c": "01020304"}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	g, err := ns.Stat(Root, "/f")
	if err != nil || g.ID != p.ID || g.Layout != ec.String() || !slices.Equal(g.Locations, []uint32{4, 5, 6}) ||
		g.XAttrs["user.x"] != "1" || g.Checksums["adler32"] != "0000abcd" || g.Size != 10 || g.MTime != f.MTime {
		t.Fatalf("converted file: %+v %v", g, err)
	}
	if _, _, err := ns.ByID(f.ID); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("old id still resolves: %v", err)
	}
	if ds := deletions(t, ns, 1); len(ds) != 1 || ds[0].Fid != f.ID {
		t.Fatalf("old stripes not queued: %v", ds)
	}
	// Rewritten meanwhile: dropped.
	q, _ := ns.BeginConvert(g.ID, layout.Layout{Kind: layout.Plain}, []uint32{2})
	create(t, ns, "/f", 10)
	if err := ns.FinishConvert(g.ID, q.ID, 10, map[string]string{"adler32": "0000abcd"}, time.Time{}); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("conversion of a rewritten file: %v", err)
	}
	if ds := deletions(t, ns, 2); len(ds) != 1 || ds[0].Fid != q.ID {
		t.Fatalf("dropped copy not queued: %v", ds)
	}
	// Other bytes: dropped.
	h, _ := ns.Stat(Root, "/f")
	r, _ := ns.BeginConvert(h.ID, layout.Layout{Kind: layout.Plain}, []uint32{3})
	if err := ns.FinishConvert(h.ID, r.ID, 10, map[string]string{"adler32": "0000abce"}, time.Time{}); !kerr.Is(err, kerr.IO) {
		t.Fatalf("conversion with a checksum mismatch: %v", err)
	}
	if k, _ := ns.Stat(Root, "/f"); k.ID != h.ID {
		t.Fatal("a mismatching copy was switched in")
	}
	// A restart aborts a conversion in flight like an upload.
	s, _ := ns.BeginConvert(h.ID, layout.Layout{Kind: layout.Plain}, []uint32{3})
	if n, err := ns.AbortStale(time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("AbortStale: %d %v", n, err)
	}
	if _, err := ns.Pending(s.ID); !kerr.Is(err, kerr.NotFound) {
		t.Fatal("conversion copy survived the restart")
	}
}

// TestMoveCopyQueuedMeanwhile: a copy queued for deletion while its move
// ran (fsck took it for an unregistered copy) is not switched in; the
// move in flight is visible to fsck until then.
func TestMoveCopyQueuedMeanwhile(t *testing.T) {
	ns := newNS(t)
	f := create(t, ns, "/f", 10)
	m := Move{Fid: f.ID, Stripe: 0, From: 1, To: 2}
	if _, err := ns.BeginMove(m); err != nil {
		t.Fatal(err)
	}
	if in, err := ns.MoveInFlight(2, f.ID); err != nil || !in {
		t.Fatalf("MoveInFlight: %v %v", in, err)
	}
	if err := ns.QueueDeletions([]Deletion{{FsID: 2, Fid: f.ID, Stripe: 0}}); err != nil {
		t.Fatal(err)
	}
	switched, err := ns.FinishMove(m, true, time.Time{})
	if err != nil || switched {
		t.Fatalf("FinishMove over a queued copy: switched=%v %v", switched, err)
	}
	if g, _ := ns.Stat(Root, "/f"); !slices.Equal(g.Locations, []uint32{1}) {
		t.Fatalf("locations: %v", g.Locations)
	}
	if in, _ := ns.MoveInFlight(2, f.ID); in {
		t.Fatal("move still in flight after it ended")
	}
}
