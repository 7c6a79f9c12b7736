package ha

import (
	"testing"

	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestVersionsAcrossFailover: versions are ordinary namespace keys
// written in the replacing commit's batch, so the server that takes over
// lists them, restores one and goes on purging the oldest (with none of
// its predecessor's memory).
func TestVersionsAcrossFailover(t *testing.T) {
	remote := memkv.New()
	a := start(t, remote, "a", nil)
	nsA := waitActive(t, a, "a becomes active")
	b := start(t, remote, "b", nil)
	if err := nsA.Mkdir(namespace.Root, "/v", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := nsA.SetXAttr(namespace.Root, "/v", nsapi.AttrVersioning, "2"); err != nil {
		t.Fatal(err)
	}
	var gen []*namespace.Inode
	for range 4 {
		f, err := nsA.CreateEmpty(namespace.Root, "/v/f", namespace.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gen = append(gen, f)
	}
	del := remote.NewBatch() // a's lease lapses: b takes over
	del.Delete(a.node.pipe.guard.Key)
	if err := del.Commit(true); err != nil {
		t.Fatal(err)
	}
	nsB := waitActive(t, b, "b takes over")
	vs, err := nsB.Versions(namespace.Root, "/v/f")
	if err != nil || len(vs) != 2 || vs[0].ID != gen[1].ID || vs[1].ID != gen[2].ID {
		t.Fatalf("versions on the new active server: %v %v", vs, err)
	}
	if _, err := nsB.RestoreVersion(namespace.Root, "/v/f", vs[0].Name); err != nil {
		t.Fatal(err)
	}
	if _, err := nsB.CreateEmpty(namespace.Root, "/v/f", namespace.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vs, _ = nsB.Versions(namespace.Root, "/v/f")
	if len(vs) != 2 || vs[0].ID != gen[3].ID || vs[1].ID != gen[1].ID {
		var ids []uint64
		for _, v := range vs {
			ids = append(ids, v.ID)
		}
		t.Fatalf("versions after a restore and an overwrite on b: %v, want [%d %d]", ids, gen[3].ID, gen[1].ID)
	}
}
