package namespace

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestCommitUpdate: an update gives the file its next data version, size,
// out-of-date checksums and stale stripes, in the record (across a
// reopen), in the subtree's size and in one "modified" event; an update
// from an older version, one with moved stripes, or one that leaves too
// few current stripes is refused and changes nothing.
func TestCommitUpdate(t *testing.T) {
	eng := memkv.New()
	ns, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Mkdir(Root, "/d", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetXAttr(Root, "/d", "sys.forced.layout", "replica:3"); err != nil {
		t.Fatal(err)
	}
	f := create(t, ns, "/d/f", 100)
	rev := ns.Revision()
	got, err := ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 0, Size: 150, Locations: f.Locations, Stale: []int{2}})
	if err != nil {
		t.Fatal(err)
	}
	if got.DataVersion != 1 || got.Size != 150 || !slices.Equal(got.Stale, []int{2}) || got.Checksums["adler32"] != "" {
		t.Fatalf("after the update: %+v", got)
	}
	evs, err := ns.Changes(context.Background(), rev, 10)
	if err != nil || len(evs) != 1 || evs[0].Kind != Modified || evs[0].DataVersion != 1 || evs[0].Size != 150 || evs[0].Ino != f.ID {
		t.Fatalf("events of the update: %+v %v", evs, err)
	}
	// An update from version 0 again: another one committed first.
	mustKind(t, errOf(ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 0, Size: 1, Locations: f.Locations})), kerr.Busy)
	// Stripes moved meanwhile.
	mustKind(t, errOf(ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 1, Size: 1, Locations: []uint32{9, 8, 7}})), kerr.Busy)
	// No current stripe would be left.
	mustKind(t, errOf(ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 1, Size: 1, Locations: f.Locations, Stale: []int{0, 1}})), kerr.Unavailable)
	// A stripe that could not take version 2 after its commit.
	if _, err := ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 1, Size: 10, Locations: f.Locations}); err != nil {
		t.Fatal(err)
	}
	if err := ns.MarkStale(f.ID, 1, 0); err != nil { // an older version: ignored
		t.Fatal(err)
	}
	if err := ns.MarkStale(f.ID, 2, 1); err != nil {
		t.Fatal(err)
	}
	d, err := ns.Stat(Root, "/d")
	if err != nil || d.TreeSize != 10 {
		t.Fatalf("the directory's subtree size after updates: %+v %v", d, err)
	}
	ns2, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := ns2.Stat(Root, "/d/f")
	if err != nil || n.DataVersion != 2 || n.Size != 10 || !slices.Equal(n.Stale, []int{1, 2}) {
		t.Fatalf("after a reopen: %+v %v", n, err)
	}
	if err := ns2.ClearStale(f.ID, 2, 1); err != nil {
		t.Fatal(err)
	}
	if n, _ := ns2.Stat(Root, "/d/f"); !slices.Equal(n.Stale, []int{2}) {
		t.Fatalf("stale stripes after one was rebuilt: %v", n.Stale)
	}
	// A checksum computed for an older version is not recorded.
	mustKind(t, ns2.AddChecksums(f.ID, 1, map[string]string{"adler32": "00000001"}), kerr.Busy)
	if err := ns2.AddChecksums(f.ID, 2, map[string]string{"adler32": "00000002"}); err != nil {
		t.Fatal(err)
	}
}

// TestCommitUpdateQuota: a file grows by an update only within its
// owner's quota; shrinking gives the bytes back.
func TestCommitUpdateQuota(t *testing.T) {
	ns := newNS(t)
	ns.Mkdir(Root, "/q", 0o777, false)
	qk := QuotaKey{QuotaUser, 0}
	if err := ns.SetQuota(Root, "/q", qk, Amount{Bytes: 1000, Files: 10}); err != nil {
		t.Fatal(err)
	}
	f := create(t, ns, "/q/f", 600)
	mustKind(t, errOf(ns.CommitUpdate(DataUpdate{Fid: f.ID, Size: 1001, Locations: f.Locations})), kerr.Quota)
	if _, err := ns.CommitUpdate(DataUpdate{Fid: f.ID, Size: 1000, Locations: f.Locations}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 1, Size: 100, Locations: f.Locations}); err != nil {
		t.Fatal(err)
	}
	qs, err := ns.Quotas(Root, "/")
	if err != nil || len(qs) != 1 || qs[0].Used[qk] != (Amount{100, 1}) {
		t.Fatalf("usage after updates: %+v %v", qs, err)
	}
}

// TestRewrite: an upload that rewrites a file (CreateOptions.Rewrite, as
// a mount sends a file it wrote from empty) commits the new content with
// the file's mode, owner and extended attributes, under its new id, and
// keeps no version of the old one where the directory keeps versions;
// one whose file is no longer that file at that data version is refused
// at the create and at the commit, the file left as it was. Like an
// update in place it needs the file's write permission, not the
// directory's, and a caller other than root clears setuid/setgid.
func TestRewrite(t *testing.T) {
	ns := newNS(t)
	if err := ns.Mkdir(Root, "/d", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetXAttr(Root, "/d", nsapi.AttrVersioning, "3"); err != nil {
		t.Fatal(err)
	}
	old, err := ns.CreateEmpty(Root, "/d/f", CreateOptions{Mode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{ns.Chown(Root, "/d/f", 1234, 5678), ns.Chmod(Root, "/d/f", 0o751), ns.SetXAttr(Root, "/d/f", "user.k", "v")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	p, err := ns.BeginCreate(Root, "/d/f", CreateOptions{Rewrite: old.ID, RewriteVersion: 0}, place)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Commit(p.ID, 5, map[string]string{"adler32": "0000abcd"}); err != nil {
		t.Fatal(err)
	}
	st, err := ns.Stat(Root, "/d/f")
	if err != nil || st.ID != p.ID || st.Size != 5 || st.Mode != 0o751 || st.UID != 1234 || st.GID != 5678 ||
		st.XAttrs["user.k"] != "v" || st.XAttrs[rewriteOf] != "" || st.Checksums["adler32"] != "0000abcd" || st.BTime != old.BTime {
		t.Fatalf("after the rewrite: %+v, %v", st, err)
	}
	if vs, err := ns.Versions(Root, "/d/f"); err != nil || len(vs) != 0 {
		t.Fatalf("versions kept of the rewritten file: %+v, %v", vs, err)
	}

	// Refused at the create: the id is gone, or the data version moved.
	_, err = ns.BeginCreate(Root, "/d/f", CreateOptions{Rewrite: old.ID}, place)
	mustKind(t, err, kerr.Busy)
	_, err = ns.BeginCreate(Root, "/d/f", CreateOptions{Rewrite: st.ID, RewriteVersion: 1}, place)
	mustKind(t, err, kerr.Busy)
	// Refused at the commit: the file changed (an update) while the
	// rewrite was written.
	p2, err := ns.BeginCreate(Root, "/d/f", CreateOptions{Rewrite: st.ID, RewriteVersion: 0}, place)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.CommitUpdate(DataUpdate{Fid: st.ID, Base: 0, Size: 2, Locations: st.Locations}); err != nil {
		t.Fatal(err)
	}
	_, err = ns.Commit(p2.ID, 9, nil)
	mustKind(t, err, kerr.Busy)
	got, err := ns.Stat(Root, "/d/f")
	if err != nil || got.ID != st.ID || got.Size != 2 || got.DataVersion != 1 {
		t.Fatalf("after the refused rewrite: %+v, %v", got, err)
	}
	_, err = ns.Pending(p2.ID)
	mustKind(t, err, kerr.NotFound)

	// By a caller who may write the file, not the directory: as an
	// update in place would, and it clears setuid and set-group-ID.
	if err := ns.Chmod(Root, "/d/f", 0o6776); err != nil {
		t.Fatal(err)
	}
	alice := Caller{UID: 1000, GID: 1000}
	p3, err := ns.BeginCreate(alice, "/d/f", CreateOptions{Rewrite: got.ID, RewriteVersion: got.DataVersion}, place)
	if err != nil {
		t.Fatalf("rewrite by a caller who may write the file only: %v", err)
	}
	if _, err := ns.Commit(p3.ID, 3, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := ns.Stat(Root, "/d/f"); err != nil || st.Mode != 0o776 || st.UID != 1234 || st.Size != 3 {
		t.Fatalf("after alice's rewrite: %+v, %v; want mode 0776, owner 1234", st, err)
	}
	_, err = ns.BeginCreate(alice, "/d/new", CreateOptions{}, place)
	mustKind(t, err, kerr.Permission) // creates still need the directory's write permission
}

// TestRewriteCommitsModeAndTime: a rewrite may carry the mode and the
// modification time its writer set meanwhile (a mount's chmod and
// utimes before the close): the commit records them with the content,
// the directory gets the commit's own time; only the owner or root may,
// checked at the create; a plain upload may not.
func TestRewriteCommitsModeAndTime(t *testing.T) {
	ns := newNS(t)
	if err := ns.Mkdir(Root, "/d", 0o777, false); err != nil {
		t.Fatal(err)
	}
	alice, bob := Caller{UID: 1000, GID: 1000}, Caller{UID: 1001, GID: 1001}
	old, err := ns.CreateEmpty(alice, "/d/f", CreateOptions{Mode: 0o666})
	if err != nil {
		t.Fatal(err)
	}
	mt := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC).UnixNano()
	_, err = ns.BeginCreate(bob, "/d/f", CreateOptions{Rewrite: old.ID, SetMode: true, Mode: 0o700}, place)
	mustKind(t, err, kerr.Permission)
	_, err = ns.BeginCreate(bob, "/d/f", CreateOptions{Rewrite: old.ID, MTime: mt}, place)
	mustKind(t, err, kerr.Permission)
	_, err = ns.BeginCreate(alice, "/d/g", CreateOptions{SetMode: true, Mode: 0o700}, place)
	mustKind(t, err, kerr.Invalid)

	p, err := ns.BeginCreate(alice, "/d/f", CreateOptions{Rewrite: old.ID, SetMode: true, Mode: 0o750, MTime: mt}, place)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixNano()
	if _, err := ns.Commit(p.ID, 5, nil); err != nil {
		t.Fatal(err)
	}
	st, err := ns.Stat(alice, "/d/f")
	if err != nil || st.ID != p.ID || st.Size != 5 || st.Mode != 0o750 || st.MTime != mt || st.UID != 1000 || st.XAttrs[rewriteMTime] != "" {
		t.Fatalf("after the rewrite: %+v, %v; want size 5, mode 0750, mtime %d", st, err, mt)
	}
	if d, err := ns.Stat(alice, "/d"); err != nil || d.MTime < before {
		t.Fatalf("the directory's mtime %d after the commit, %v; want the commit's time (>= %d)", d.MTime, err, before)
	}
}
