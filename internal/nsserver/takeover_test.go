package nsserver

import (
	"bytes"
	"testing"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/layout"
)

// A namespace server that just started (a restart, or a standby taking
// over) has not heard from the storage servers yet: a placement asks the
// client to retry instead of saying there is no space; once they have
// reported, placement works.
func TestPlacementWaitsForStorageServersAfterStart(t *testing.T) {
	eng := memkv.New()
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	s, err := New(Config{Engine: eng, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	register(t, s, 2, 2)
	s2, err := New(Config{Engine: eng, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := layout.Parse("replica:2")
	if _, err := s2.reg.Place(l, ""); !kerr.Is(err, kerr.Busy) {
		t.Fatalf("placement before any storage server reported: %v, want busy", err)
	}
	register(t, s2, 2, 2)
	if _, err := s2.reg.Place(l, ""); err != nil {
		t.Fatalf("placement once they reported: %v", err)
	}
	big, _ := layout.Parse("ec:4+2")
	if _, err := s2.reg.Place(big, ""); !kerr.Is(err, kerr.NoSpace) {
		t.Fatalf("placement needing more filesystems than exist: %v, want no space", err)
	}
}
