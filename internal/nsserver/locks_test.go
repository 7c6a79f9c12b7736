package nsserver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestConfigDuringCreates: filesystem settings changed while files are
// created. A create holds the namespace's lock while placement reads the
// registry; the registry used to hold its own lock while the namespace
// saved a filesystem's settings, and the two waited for each other
// (kaon fs config during uploads hung the namespace server).
func TestConfigDuringCreates(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 2, 3)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		for i := 0; i < 300; i++ {
			if _, err := s.Open(ctx, root, fmt.Sprintf("/f%d", i), nsapi.OpenRequest{Write: true, Create: true, Truncate: true}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 300; i++ {
			if err := s.ConfigFilesystem(ctx, root, 1, "drain.rate", fmt.Sprintf("%dM", 1+i%50)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 300; i++ {
			if err := s.SetGroup(ctx, root, "default.0", "threshold", fmt.Sprint(1+i%20)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("creates, fs config and group set together did not finish within 60 s: the namespace and registry locks wait for each other")
	}
}
