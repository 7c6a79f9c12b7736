//go:build ceph

package rados

import (
	"bytes"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/cephtest"
	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/backendtest"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// The suite runs against the project's real Ceph cluster (cephtest: one
// per test binary, or KAON_CEPH_DIR's).
func TestMain(m *testing.M) { os.Exit(cephtest.Main(m)) }

var nsSeq atomic.Int64

// hooks opens stores in fresh namespaces of pool, cut into objects of
// objSize (small ones make the suite's stripes span several objects).
func hooks(c *cephtest.Cluster, pool string, objSize int64) backendtest.Hooks {
	return backendtest.Hooks{
		Open: func(t *testing.T) backend.Store {
			ns := fmt.Sprintf("test-%d-%d", time.Now().UnixNano(), nsSeq.Add(1))
			st, err := Open(fmt.Sprintf("rados://%s@%s/%s?conf=%s", c.Client, pool, ns, c.Conf), Options{Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Configure(backend.Settings{ObjectSize: objSize}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { purge(t, st.(*Store)) })
			return st
		},
		Litter: func(t *testing.T, s backend.Store) {
			ioctx, err := s.(*Store).io()
			if err == nil {
				err = ioctx.WriteFull("somebody-elses-object", []byte("x"))
			}
			if err != nil {
				t.Fatal(err)
			}
		},
		LoseMarker: func(t *testing.T, s backend.Store) {
			ioctx, err := s.(*Store).io()
			if err == nil {
				err = ioctx.Delete(markerObject)
			}
			if err != nil {
				t.Fatal(err)
			}
		},
	}
}

// purge removes every object of the store's namespace.
func purge(t *testing.T, s *Store) {
	ioctx, err := s.io()
	if err != nil {
		t.Error(err)
		return
	}
	var names []string
	if err := s.walkAll(ioctx, func(n string) bool { names = append(names, n); return true }); err != nil {
		t.Error(err)
	}
	for _, n := range names {
		if err := ioctx.Delete(n); err != nil {
			t.Errorf("purge %s: %v", n, err)
		}
	}
}

func TestSuite(t *testing.T) {
	c := cephtest.Start(t)
	t.Run("replicated", func(t *testing.T) { backendtest.Run(t, hooks(c, c.RadosPool, DefaultObjectSize)) })
	t.Run("replicated-64k-objects", func(t *testing.T) { backendtest.Run(t, hooks(c, c.RadosPool, 64<<10)) })
	t.Run("erasure-coded", func(t *testing.T) { backendtest.Run(t, hooks(c, c.ECPool, 64<<10)) })
}

// TestObjects: a stripe is cut into objects of the configured size, named
// as format.go says, its metadata on the head; Remove takes them all.
func TestObjects(t *testing.T) {
	c := cephtest.Start(t)
	s := hooks(c, c.RadosPool, 1<<20).Open(t).(*Store)
	if err := s.Initialize(backend.Identity{FsID: 7, UUID: "u"}); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), (2<<20+5)/16+1)[:2<<20+5] // 2 MiB + 5: three objects
	w, err := s.Create(0x2a, backend.CreateOptions{Overlap: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Finish(backend.Meta{Stripe: 1, Layout: "replica:2", Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	ioctx, _ := s.io()
	for n, want := range []uint64{1 << 20, 1 << 20, 5} {
		name := objectName(0x2a, int64(n))
		st, err := ioctx.Stat(name)
		if err != nil || st.Size != want {
			t.Fatalf("object %s: %+v %v, want %d bytes", name, st, err, want)
		}
	}
	if name := objectName(0x2a, 1); name != "000000000000002a.00000001" {
		t.Fatalf("object name %s", name)
	}
	xa, err := ioctx.ListXattrs("000000000000002a")
	if err != nil || string(xa["kaon.fid"]) != "42" || string(xa["kaon.length"]) != fmt.Sprint(len(data)) || string(xa["kaon.objsize"]) != "1048576" {
		t.Fatalf("head xattrs %q %v", xa, err)
	}
	if err := s.Remove(0x2a); err != nil {
		t.Fatal(err)
	}
	for n := range 3 {
		if _, err := ioctx.Stat(objectName(0x2a, int64(n))); !kerr.Is(s.fail("stat", "", err), kerr.NotFound) {
			t.Fatalf("object %d after Remove: %v", n, err)
		}
	}
	in := s.Info()
	if in.Kind != backend.KindRados || in.Backend == "" || in.Health == "" {
		t.Fatalf("Info %+v", in)
	}
}
