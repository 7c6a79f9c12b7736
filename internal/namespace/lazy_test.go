package namespace

import (
	"sync"
	"testing"

	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
)

// syncStore records whether each applied batch asked to be durable.
type syncStore struct {
	kv.Store
	mu    sync.Mutex
	syncs []bool
}

type syncBatch struct {
	kv.Batch
	s *syncStore
}

func (s *syncStore) NewBatch() kv.Batch { return &syncBatch{Batch: s.Store.NewBatch(), s: s} }

func (s *syncStore) take() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.syncs
	s.syncs = nil
	return out
}

func (b *syncBatch) Apply(sync bool) (func() error, error) {
	b.s.mu.Lock()
	b.s.syncs = append(b.s.syncs, sync)
	b.s.mu.Unlock()
	return b.Batch.Apply(sync)
}

// The pending record of a new upload is not waited for (a redirect would
// wait for the disk the uploads keep busy), except when it extends the
// persisted block of ids, which must be durable before an id of it is
// handed out; the commit, and other mutations, are waited for.
func TestBeginCreateDoesNotWaitForSync(t *testing.T) {
	s := &syncStore{Store: memkv.New()}
	ns, err := Open(s, Options{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.take()
	steps := []struct {
		what string
		do   func() error
		sync bool
	}{
		{"mkdir", func() error { return ns.Mkdir(Root, "/d", 0o755, false) }, true},
		{"a create", func() error { _, err := ns.BeginCreate(Root, "/d/a", CreateOptions{}, place); return err }, false},
		{"another create", func() error { _, err := ns.BeginCreate(Root, "/d/b", CreateOptions{}, place); return err }, false},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		got := s.take()
		if len(got) != 1 || got[0] != st.sync {
			t.Fatalf("%s: applied with sync %v, want [%v]", st.what, got, st.sync)
		}
	}
	ns.idLimit = ns.nextID // the next create needs a new block
	if _, err := ns.BeginCreate(Root, "/d/c", CreateOptions{}, place); err != nil {
		t.Fatal(err)
	}
	if got := s.take(); len(got) != 1 || !got[0] {
		t.Fatalf("a create that extends the id block: applied with sync %v, want [true]", got)
	}
	f, err := ns.BeginCreate(Root, "/d/e", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	s.take()
	if _, err := ns.Commit(f.ID, 1, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	if got := s.take(); len(got) != 1 || !got[0] {
		t.Fatalf("commit: applied with sync %v, want [true]", got)
	}
}
