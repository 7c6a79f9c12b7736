package mount

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestDirectReadBehindJournal: a read-only handle reads file 7's stripe
// from this host's backend (the direct path). An update of the file
// commits elsewhere and is told to the mount (data version 1); its
// journal is beside the stripe, not applied yet (the applies follow the
// commit's reply). The handle must not read the stripe's old bytes any
// more: it reads through the storage server (here unreachable, so the
// read fails instead of answering the old bytes). Once the journal is
// applied, a handle that finds the stripe at the version reads it
// directly again, the new bytes.
func TestDirectReadBehindJournal(t *testing.T) {
	f := tree(t)
	f.opts.Timeout = time.Minute
	n := f.lookupNode(7)
	old := bytes.Repeat([]byte("o"), 5)
	n.attr.Size = int64(len(old))
	st := posix.New(t.TempDir()+"/fs", posix.Options{IO: backend.IOBuffered, Sync: true})
	if err := st.Initialize(backend.Identity{FsID: 1, UUID: "direct-test"}); err != nil {
		t.Fatal(err)
	}
	w, err := st.Create(7, backend.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(old)
	if err := w.Finish(backend.Meta{Fid: 7, Layout: "replica:2", Size: int64(len(old)), Path: "/f"}); err != nil {
		t.Fatal(err)
	}
	// The storage server: nothing listens there.
	c := client.New("http://127.0.0.1:1")
	open := func() *handle {
		r, err := st.Open(7)
		if err != nil {
			t.Fatal(err)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		return &handle{n: n, c: c, local: r, localSt: st, localFid: 7, localGen: n.gen}
	}
	read := func(h *handle) ([]byte, error) {
		p := make([]byte, len(old))
		m, err := h.remote(context.Background(), p, 0)
		return p[:m], err
	}
	h := open()
	if got, err := read(h); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("the first direct read: %q, %v; want %q", got, err, old)
	}

	head := backend.JournalHead{From: 0, Meta: backend.Meta{Fid: 7, Layout: "replica:2", Size: int64(len(old)), Path: "/f", Version: 1}}
	if err := st.Prepare(7, head, bytes.NewReader(backend.EncodeWrite(nil, 1, []byte("NEW")))); err != nil {
		t.Fatal(err)
	}
	f.apply(nsapi.Invalidation{Event: nsapi.Event{Kind: nsapi.EventModified, Ino: 7, Size: int64(len(old)), DataVersion: 1}})
	if got, err := read(h); err == nil {
		t.Fatalf("after an update committed elsewhere (its journal not applied), the handle read %q from its local stripe; want it read through the storage server", got)
	}
	if h.local != nil {
		t.Fatal("the handle keeps the local stripe that is behind the file's version")
	}

	h2 := open()
	h2.localGen-- // opened before the change was told
	if err := st.Apply(7); err != nil {
		t.Fatal(err)
	}
	if got, err := read(h2); err != nil || string(got) != "oNEWo" {
		t.Fatalf("once the journal is applied a handle reads %q, %v; want %q from its local stripe", got, err, "oNEWo")
	}
	h2.closeLocal()
}
