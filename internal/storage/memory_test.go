package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/bufmem"
)

// TestStreamBuffersCounted: every stream buffer the servers hand out
// (bufmem) is counted in a stream budget, also those of the stripe
// transfers a server serves for another server's streams (stripes
// received for an upload, stripes read for a decode), and all of it is
// returned when the streams end. Before stripe transfers were charged,
// the receiving server held a copy buffer per stripe that no budget knew
// of.
func TestStreamBuffersCounted(t *testing.T) {
	servers, ns, key, _ := memServers(t, 2, 3)
	const budgetSize = 4 << 20 // a few streams at once: the others wait
	for _, s := range servers {
		s.budget = newBudget(budgetSize)
	}
	start := bufmem.InUse()
	bufmem.ResetPeak()
	const streams = 8
	data := make([]byte, 1<<20+17)
	rand.Read(data)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 2*streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fid := uint64(100 + i)
			c := spread(fid, "ec:4+2:65536", 6, 2)
			u, err := servers[i%2].NewUpload(ctx, c, key.Sign(c), time.Minute)
			if err != nil {
				errs <- fmt.Errorf("upload %d: %v", i, err)
				return
			}
			if _, err := u.ReadFrom(bytes.NewReader(data)); err != nil {
				errs <- fmt.Errorf("upload %d: %v", i, err)
				return
			}
			if err := u.Commit(ctx); err != nil {
				errs <- fmt.Errorf("upload %d: commit: %v", i, err)
				return
			}
			commit, _ := ns.Committed(fid)
			rc := *c
			rc.Write, rc.Size, rc.Sums = false, int64(len(data)), commit.Checksums
			f, err := servers[(i+1)%2].Open(ctx, &rc, key.Sign(&rc), time.Minute)
			if err != nil {
				errs <- fmt.Errorf("read %d: open: %v", i, err)
				return
			}
			defer f.Close()
			var got bytes.Buffer
			if _, err := Copy(&got, f); err != nil || !bytes.Equal(got.Bytes(), data) {
				errs <- fmt.Errorf("read %d: %v, equal %v", i, err, bytes.Equal(got.Bytes(), data))
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("uploads and reads did not finish within a minute (waiting for stream memory?)")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var counted int64
	for _, s := range servers {
		counted += s.budget.peak.Load()
		if u := s.budget.used.Load(); u != 0 {
			t.Errorf("server %s: %d bytes still counted after every stream ended", s.cfg.Addr, u)
		}
	}
	if held := bufmem.Peak() - start; held > counted {
		t.Errorf("streams held up to %d bytes of buffers, the budgets counted at most %d", held, counted)
	}
	if left := bufmem.InUse() - start; left != 0 {
		t.Errorf("%d bytes of stream buffers not returned after every stream ended", left)
	}
}

// TestBudgetDebt: a stripe transfer charged into a full budget overdraws
// it, and the next release pays the overdraft back before anyone else is
// admitted; once everything is released the whole budget is free again.
func TestBudgetDebt(t *testing.T) {
	b := newBudget(10)
	r1, err := b.acquire(context.Background(), 8, time.Second, "read", "/f")
	if err != nil {
		t.Fatal(err)
	}
	charged := b.charge(5) // does not fit: overdraws
	if u := b.used.Load(); u != 13 {
		t.Fatalf("used %d after an overdraft, want 13", u)
	}
	r1()
	if b.sem.TryAcquire(6) {
		t.Fatal("6 bytes admitted while 5 of 10 are charged")
	}
	if !b.sem.TryAcquire(5) {
		t.Fatal("5 bytes refused while 5 of 10 are charged")
	}
	b.sem.Release(5)
	charged()
	charged() // twice is once
	if !b.sem.TryAcquire(10) || b.used.Load() != 0 || b.debt != 0 {
		t.Fatalf("after every release: used %d, debt %d, whole budget free: false", b.used.Load(), b.debt)
	}
}
