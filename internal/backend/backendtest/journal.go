package backendtest

import (
	"bytes"
	"testing"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// model applies operations to b as a stripe must.
type model struct{ b []byte }

func (m *model) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *model) Truncate(size int64) error {
	if size <= int64(len(m.b)) {
		m.b = m.b[:size]
	} else {
		m.b = append(m.b, make([]byte, size-int64(len(m.b)))...)
	}
	return nil
}

// runJournal is the suite of stores that change stripes in place
// (backend.Updater): a prepared update leaves the stripe as it was, is
// applied whole (content, metadata with the new version) or discarded, and
// never applies to a stripe at another version (a stale one).
func runJournal(t *testing.T, h Hooks) {
	if _, ok := h.Open(t).(backend.Updater); !ok {
		t.Skip("the store does not change stripes in place")
	}
	ops := func(m *model) []byte {
		var b []byte
		b = backend.EncodeWrite(b, 10, []byte("hello"))
		b = backend.EncodeTruncate(b, 7000)
		b = backend.EncodeWrite(b, 9000, randBytes(9, 5000)) // past the end: a hole
		b = backend.EncodeTruncate(b, 12000)
		b = backend.EncodeWrite(b, 4090, randBytes(10, 20))
		if m != nil {
			if err := backend.ReplayOps(bytes.NewReader(b), m); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	head := func(fid uint64, from, to uint64, size int) backend.JournalHead {
		m := meta(fid, size)
		m.Version, m.Checksums = to, nil
		return backend.JournalHead{From: from, Meta: m}
	}
	t.Run("PrepareApply", func(t *testing.T) {
		s := initialized(t, h)
		u := s.(backend.Updater)
		old := randBytes(1, 10000)
		put(t, s, 7, old, false)
		want := &model{b: bytes.Clone(old)}
		h7 := head(7, 0, 1, 12000)
		if err := u.Prepare(7, h7, bytes.NewReader(ops(want))); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 7, old) // prepared, not applied
		if got, err := u.Prepared(7); err != nil || got.From != 0 || got.Meta.Version != 1 {
			t.Fatalf("Prepared = %+v, %v", got, err)
		}
		if err := u.Apply(7); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 7, want.b)
		m, err := s.ReadMeta(7)
		if err != nil || m.Version != 1 || m.Size != h7.Meta.Size || len(m.Checksums) != 0 {
			t.Fatalf("metadata after the update: %+v %v", m, err)
		}
		_, err = u.Prepared(7)
		wantKind(t, "Prepared after Apply", err, kerr.NotFound)
		wantKind(t, "Apply again", u.Apply(7), kerr.NotFound)
	})
	t.Run("Discard", func(t *testing.T) {
		s := initialized(t, h)
		u := s.(backend.Updater)
		old := randBytes(2, 5000)
		put(t, s, 8, old, false)
		if err := u.Prepare(8, head(8, 0, 1, 1), bytes.NewReader(ops(nil))); err != nil {
			t.Fatal(err)
		}
		if err := u.Discard(8); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 8, old)
		if m, _ := s.ReadMeta(8); m.Version != 0 {
			t.Fatalf("a discarded update changed the version: %+v", m)
		}
		if err := u.Discard(8); err != nil {
			t.Fatalf("Discard without a journal: %v", err)
		}
	})
	t.Run("StaleStripeUntouched", func(t *testing.T) {
		s := initialized(t, h)
		u := s.(backend.Updater)
		old := randBytes(3, 5000)
		put(t, s, 9, old, false)
		// An update from version 4 finds the stripe at 0: it missed three.
		if err := u.Prepare(9, head(9, 4, 5, 1), bytes.NewReader(ops(nil))); err != nil {
			t.Fatal(err)
		}
		wantKind(t, "Apply to a stale stripe", u.Apply(9), kerr.IO)
		mustRead(t, s, 9, old)
		if m, _ := s.ReadMeta(9); m.Version != 0 {
			t.Fatalf("a stale stripe's version changed: %+v", m)
		}
	})
	t.Run("SecondPrepareReplacesFirst", func(t *testing.T) {
		s := initialized(t, h)
		u := s.(backend.Updater)
		put(t, s, 11, []byte("0123456789"), false)
		u.Prepare(11, head(11, 0, 1, 10), bytes.NewReader(backend.EncodeWrite(nil, 0, []byte("AAAA"))))
		if err := u.Prepare(11, head(11, 0, 1, 10), bytes.NewReader(backend.EncodeWrite(nil, 2, []byte("BB")))); err != nil {
			t.Fatal(err)
		}
		if err := u.Apply(11); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 11, []byte("01BB456789"))
	})
	t.Run("PrepareOfMissingStripe", func(t *testing.T) {
		s := initialized(t, h)
		err := s.(backend.Updater).Prepare(12, head(12, 0, 1, 1), bytes.NewReader(nil))
		wantKind(t, "Prepare without a stripe", err, kerr.NotFound)
	})
}
