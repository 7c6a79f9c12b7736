package storage

import (
	"slices"
	"sync"
)

// writing is the set of uploads this server writes: claimed at the
// namespace, not committed or aborted yet. Heartbeats report it, so the
// namespace keeps them pending however long they stream and aborts those
// nobody writes any more (nsserver/uploads.go).
type writing struct {
	mu   sync.Mutex
	fids map[uint64]bool
}

func (w *writing) add(fid uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fids == nil {
		w.fids = map[uint64]bool{}
	}
	w.fids[fid] = true
}

func (w *writing) remove(fid uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.fids, fid)
}

func (w *writing) list() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]uint64, 0, len(w.fids))
	for fid := range w.fids {
		out = append(out, fid)
	}
	slices.Sort(out)
	return out
}
