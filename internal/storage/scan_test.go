package storage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/memstore"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/fsck"
	"github.com/kaon-storage/kaon/internal/layout"
)

// What a scan finds and what a rebuild writes, compared by the
// namespace side's checks (package fsck).

// fixture is one file written over memory stores, one per stripe.
type fixture struct {
	f      *stripedFile
	data   []byte
	stores []*memstore.Store
}

func memStore(t *testing.T, id uint32) *memstore.Store {
	t.Helper()
	s := memstore.New(fmt.Sprint(id))
	if err := s.Initialize(backend.Identity{FsID: id, UUID: "u"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// write stores a file of size bytes with layout ls, stripe i on store i
// (filesystem id i+1).
func write(t *testing.T, ls string, size int) *fixture {
	t.Helper()
	l, err := layout.Parse(ls)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	m, _ := checksum.NewMulti(checksum.Adler32, checksum.CRC32C)
	m.Write(data)
	fx := &fixture{data: data, f: &stripedFile{Fid: 42, Path: "/d/f", Layout: l.String(), Size: int64(size), Checksums: m.Sums()}}
	ws := make([]io.Writer, l.Stripes())
	bws := make([]backend.Writer, l.Stripes())
	for i := range l.Stripes() {
		st := memStore(t, uint32(i+1))
		fx.stores = append(fx.stores, st)
		fx.f.Locations = append(fx.f.Locations, uint32(i+1))
		w, err := st.Create(42, backend.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ws[i], bws[i] = w, w
	}
	if l.Kind == layout.EC {
		ew, err := erasure.NewWriter(erasure.FromLayout(l), ws)
		if err != nil {
			t.Fatal(err)
		}
		ew.Write(data)
		if err := ew.Close(); err != nil {
			t.Fatal(err)
		}
	} else {
		for _, w := range ws {
			w.Write(data)
		}
	}
	for i, w := range bws {
		if err := w.Finish(fx.f.meta(i)); err != nil {
			t.Fatal(err)
		}
	}
	return fx
}

// file is the fixture's file as the namespace records it.
func (fx *fixture) file() *fsck.File {
	f := fx.f
	return &fsck.File{Fid: f.Fid, Path: f.Path, Layout: f.Layout, Size: f.Size, Checksums: f.Checksums, Locations: f.Locations}
}

// replace rewrites stripe i with data (metadata as it was, unless m).
func (fx *fixture) replace(t *testing.T, i int, data []byte, m *backend.Meta) {
	t.Helper()
	st := fx.stores[i]
	st.Remove(42)
	w, _ := st.Create(42, backend.CreateOptions{})
	w.Write(data)
	meta := fx.f.meta(i)
	if m != nil {
		meta = *m
	}
	if err := w.Finish(meta); err != nil {
		t.Fatal(err)
	}
}

func (fx *fixture) stripe(t *testing.T, i int) []byte {
	t.Helper()
	r, err := fx.stores[i].Open(42)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := make([]byte, r.Size())
	r.ReadAt(b, 0)
	return b
}

// scan scans stripe i's store and returns what it found.
func (fx *fixture) scan(t *testing.T, i int, scrub bool) []message.FsckStripe {
	t.Helper()
	var out []message.FsckStripe
	err := walkStore(context.Background(), fx.stores[i], &scanOptions{Scrub: scrub}, func(b []message.FsckStripe, _, _ int64) error {
		out = append(out, b...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func classes(fs []fsck.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Class))
	}
	slices.Sort(out)
	return out
}

// TestScanAndCheck: what a scan finds about damaged stripes, and the
// class CheckStripe gives each.
func TestScanAndCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout string
		damage func(t *testing.T, fx *fixture)
		scrub  bool
		want   []string // classes of stripe 1's findings
	}{
		{"healthy replica", "replica:2", func(*testing.T, *fixture) {}, true, nil},
		{"healthy ec", "ec:4+2:4096", func(*testing.T, *fixture) {}, true, nil},
		{"truncated replica", "replica:2", func(t *testing.T, fx *fixture) { fx.replace(t, 1, fx.data[:100], nil) }, false, []string{"d_mem_sz_diff"}},
		{"corrupt replica, no scrub", "replica:3", func(t *testing.T, fx *fixture) {
			b := slices.Clone(fx.data)
			b[7] ^= 1
			fx.replace(t, 1, b, nil)
		}, false, nil},
		{"corrupt replica", "replica:3", func(t *testing.T, fx *fixture) {
			b := slices.Clone(fx.data)
			b[7] ^= 1
			fx.replace(t, 1, b, nil)
		}, true, []string{"d_cx_diff"}},
		{"corrupt ec frame", "ec:4+2:4096", func(t *testing.T, fx *fixture) {
			b := fx.stripe(t, 1)
			b[5000] ^= 1
			fx.replace(t, 1, b, nil)
		}, true, []string{"blockxs_err"}},
		{"metadata size", "replica:2", func(t *testing.T, fx *fixture) {
			m := fx.f.meta(1)
			m.Size = 5
			fx.replace(t, 1, fx.data[:5], &m)
		}, false, []string{"m_mem_sz_diff"}},
		{"metadata checksum", "replica:2", func(t *testing.T, fx *fixture) {
			m := fx.f.meta(1)
			m.Checksums = map[string]string{"adler32": "00000001"}
			fx.replace(t, 1, fx.data, &m)
		}, false, []string{"m_cx_diff"}},
		{"metadata stripe index", "ec:4+2:4096", func(t *testing.T, fx *fixture) {
			m := fx.f.meta(1)
			m.Stripe = 3
			fx.replace(t, 1, fx.stripe(t, 1), &m)
		}, false, []string{"stripe_err"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := write(t, tc.layout, 50000)
			tc.damage(t, fx)
			found := fx.scan(t, 1, tc.scrub)
			if len(found) != 1 || found[0].Fid != 42 {
				t.Fatalf("scan found %+v", found)
			}
			if tc.scrub != found[0].Scrubbed {
				t.Fatalf("scrubbed=%v", found[0].Scrubbed)
			}
			got := classes(fsck.CheckStripe(2, found[0], fsck.Lookup{File: fx.file()}))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("findings %v, want %v (stripe %+v)", got, tc.want, found[0])
			}
		})
	}
}

// TestCheckWhereabouts: orphans, copies the namespace does not register,
// stripes being written or queued for deletion.
func TestCheckWhereabouts(t *testing.T) {
	fx := write(t, "replica:2", 1000)
	s := fx.scan(t, 0, false)[0]
	if got := classes(fsck.CheckStripe(1, s, fsck.Lookup{})); !slices.Equal(got, []string{"orphans_n"}) {
		t.Fatalf("no file: %v", got)
	}
	if fs := fsck.CheckStripe(1, s, fsck.Lookup{}); fs[0].Path != "/d/f" {
		t.Fatalf("orphan names the path it was written under: %+v", fs[0])
	}
	if got := fsck.CheckStripe(1, s, fsck.Lookup{Pending: true}); len(got) != 0 {
		t.Fatalf("upload in progress: %v", got)
	}
	if got := fsck.CheckStripe(1, s, fsck.Lookup{Queued: true}); len(got) != 0 {
		t.Fatalf("queued for deletion: %v", got)
	}
	if got := classes(fsck.CheckStripe(9, s, fsck.Lookup{File: fx.file()})); !slices.Equal(got, []string{"rep_diff_n", "unreg_n"}) {
		t.Fatalf("on an unregistered filesystem: %v", got)
	}
	bad := message.FsckStripe{Fid: 42, MetaErr: "no user.kaon.fid attribute", DiskSize: 1000}
	if got := classes(fsck.CheckStripe(1, bad, fsck.Lookup{File: fx.file()})); !slices.Equal(got, []string{"stripe_err"}) {
		t.Fatalf("unreadable metadata: %v", got)
	}
}

// memStripes are a fixture's stripes for a rebuild.
type memStripes struct{ fx *fixture }

func (m memStripes) Open(_ context.Context, i int) (io.ReaderAt, func(), error) {
	r, err := m.fx.stores[i].Open(42)
	if err != nil {
		return nil, nil, err
	}
	return r, func() { r.Close() }, nil
}

func (m memStripes) Replace(_ context.Context, i int) (backend.Writer, error) {
	m.fx.stores[i].Remove(42)
	return m.fx.stores[i].Create(42, backend.CreateOptions{})
}

// TestRebuild: erasure-coded stripes decoded from the others, replicas
// copied from one whose bytes match the file's checksum (a corrupt one is
// passed over), both byte-exact with their metadata; too little left
// fails without leaving a stripe behind.
func TestRebuild(t *testing.T) {
	ctx := context.Background()
	t.Run("ec", func(t *testing.T) {
		fx := write(t, "ec:4+2:4096", 100000)
		want := [][]byte{fx.stripe(t, 0), fx.stripe(t, 4)}
		fx.stores[0].Remove(42)
		b := slices.Clone(want[1])
		b[10] ^= 1
		fx.replace(t, 4, b, nil)
		if err := rebuildStripes(ctx, fx.f, []int{0, 4}, memStripes{fx}); err != nil {
			t.Fatal(err)
		}
		for k, i := range []int{0, 4} {
			if !bytes.Equal(fx.stripe(t, i), want[k]) {
				t.Fatalf("stripe %d not byte-exact after rebuild", i)
			}
			if m, _ := fx.stores[i].ReadMeta(42); m.Stripe != i || m.Size != fx.f.Size || m.Layout != fx.f.Layout {
				t.Fatalf("stripe %d metadata %+v", i, m)
			}
			if found := fx.scan(t, i, true); len(fsck.CheckStripe(uint32(i+1), found[0], fsck.Lookup{File: fx.file()})) != 0 {
				t.Fatalf("stripe %d still has findings", i)
			}
		}
	})
	t.Run("ec too few", func(t *testing.T) {
		fx := write(t, "ec:4+2:4096", 100000)
		fx.stores[1].Remove(42)
		fx.stores[2].Remove(42)
		if err := rebuildStripes(ctx, fx.f, []int{0}, memStripes{fx}); err == nil || !strings.Contains(err.Error(), "need 4") {
			t.Fatalf("rebuild from 3 of 6: %v", err)
		}
		if _, err := fx.stores[0].Open(42); err == nil {
			// Stripe 0 was healthy and is not touched before enough sources are found.
		} else {
			t.Fatalf("stripe 0 removed by a rebuild that could not run: %v", err)
		}
	})
	t.Run("replica", func(t *testing.T) {
		fx := write(t, "replica:3", 70000)
		bad := slices.Clone(fx.data)
		bad[3] ^= 1
		fx.replace(t, 0, bad, nil) // silently corrupt: the mover refuses it
		fx.stores[2].Remove(42)    // the one to rebuild
		if err := rebuildStripes(ctx, fx.f, []int{2}, memStripes{fx}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fx.stripe(t, 2), fx.data) {
			t.Fatal("replica not byte-exact")
		}
	})
	t.Run("replica none healthy", func(t *testing.T) {
		fx := write(t, "replica:2", 70000)
		bad := slices.Clone(fx.data)
		bad[3] ^= 1
		fx.replace(t, 0, bad, nil)
		err := rebuildStripes(ctx, fx.f, []int{1}, memStripes{fx})
		if err == nil || !strings.Contains(err.Error(), "no healthy replica") {
			t.Fatalf("rebuild from a corrupt replica: %v", err)
		}
		if _, err := fx.stores[1].Open(42); err == nil {
			t.Fatal("a stripe that failed its checksum was left behind")
		}
	})
}
