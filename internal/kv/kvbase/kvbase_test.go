package kvbase

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kv"
)

// mapView is a View over a map, for testing the transaction alone.
type mapView map[string]string

func (m mapView) Get(k []byte) ([]byte, uint64, error) {
	if v, ok := m[string(k)]; ok {
		return []byte(v), 0, nil
	}
	return nil, 0, kv.ErrNotFound
}

func (m mapView) Scan(start, end []byte, fn func(k, v []byte, ver uint64) bool) error {
	var keys []string
	for k := range m {
		if bytes.Compare([]byte(k), start) >= 0 && (end == nil || bytes.Compare([]byte(k), end) < 0) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !fn([]byte(k), []byte(m[k]), 0) {
			break
		}
	}
	return nil
}

func newTx(m mapView) *Tx { return NewTx(func() (View, error) { return m, nil }) }

// An early stop at a buffered key must record only the view's keys before
// it: otherwise Validate sees a key "outside" the range and every commit
// conflicts.
func TestScanStopAtBufferedKeyValidates(t *testing.T) {
	m := mapView{"a": "1", "c": "3", "e": "5"}
	tx := newTx(m)
	tx.Put([]byte("b"), []byte("2"))
	var seen []string
	if err := tx.Scan(nil, nil, func(k, v []byte) bool { seen = append(seen, string(k)); return string(k) != "b" }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[1] != "b" {
		t.Fatalf("scan saw %v, want [a b]", seen)
	}
	if ok, err := tx.Validate(m); !ok || err != nil {
		t.Fatalf("unchanged store does not validate: %v %v", ok, err)
	}
	m["aa"] = "x" // inserted in the range seen (up to b): conflict
	if ok, _ := tx.Validate(m); ok {
		t.Fatal("insert at aa (before the stop key b) not detected")
	}
	delete(m, "aa")
	m["d"] = "x" // beyond where the scan stopped: not read
	if ok, _ := tx.Validate(m); !ok {
		t.Fatal("insert after the stop key counted as a conflict")
	}
}

func TestScanMergesDeletesAndOverwrites(t *testing.T) {
	m := mapView{"a": "1", "b": "2", "c": "3"}
	tx := newTx(m)
	tx.Delete([]byte("a"))
	tx.Put([]byte("b"), []byte("22"))
	tx.Put([]byte("d"), []byte("4"))
	tx.Delete([]byte("zz")) // delete of an absent key
	var got []string
	if err := tx.Scan(nil, nil, func(k, v []byte) bool { got = append(got, string(k)+"="+string(v)); return true }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b=22", "c=3", "d=4"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("merged scan %v, want %v", got, want)
	}
	if ok, _ := tx.Validate(m); !ok {
		t.Fatal("own writes count as a conflict")
	}
	delete(m, "a") // deleted by someone else, also read (scanned)
	if ok, _ := tx.Validate(m); ok {
		t.Fatal("concurrent delete of a scanned key not detected")
	}
}

func TestReadErrorIsSticky(t *testing.T) {
	boom := errors.New("boom")
	tx := NewTx(func() (View, error) { return nil, boom })
	if _, err := tx.Get([]byte("k")); !errors.Is(err, boom) {
		t.Fatalf("Get: %v", err)
	}
	tx.Put([]byte("k"), []byte("v"))
	if !errors.Is(tx.Err(), boom) {
		t.Fatal("read error forgotten: the transaction could commit on a failed read")
	}
}

func TestFeedHistoryAndCompaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := NewFeed(3, 10) // opened at revision 10, keeps 3 commits
	for rev := uint64(11); rev <= 15; rev++ {
		f.Publish(rev, []kv.Event{{Rev: rev, Key: []byte("k"), Value: []byte("v")}})
	}
	// Kept: 13, 14, 15.
	r := <-f.Watch(ctx, nil, 13)
	if r.Err != nil || len(r.Events) != 3 || r.Events[0].Rev != 13 {
		t.Fatalf("watch from 13: %+v", r)
	}
	if r := <-f.Watch(ctx, nil, 12); !errors.Is(r.Err, kv.ErrCompacted) {
		t.Fatalf("watch from an evicted revision: %+v, want ErrCompacted", r)
	}
	g := NewFeed(3, 10)
	if r := <-g.Watch(ctx, nil, 5); !errors.Is(r.Err, kv.ErrCompacted) {
		t.Fatalf("watch from before the feed started: %+v, want ErrCompacted", r)
	}
	// A watcher that reads nothing falls behind and is told so.
	w := g.Watch(ctx, []byte("k"), 11)
	for rev := uint64(11); rev <= 20; rev++ {
		g.Publish(rev, []kv.Event{{Rev: rev, Key: []byte("k")}})
	}
	var last kv.WatchResponse
	for r := range w {
		last = r
	}
	if !errors.Is(last.Err, kv.ErrCompacted) {
		t.Fatalf("slow watcher ended with %+v, want ErrCompacted", last)
	}
	// History is bounded in bytes too: two 40 MiB commits do not both stay.
	h := NewFeed(100, 0)
	for rev := uint64(1); rev <= 2; rev++ {
		h.PublishLazy(rev, 40<<20, func() []kv.Event { return []kv.Event{{Rev: rev, Key: []byte("big")}} })
	}
	if r := <-h.Watch(ctx, nil, 1); !errors.Is(r.Err, kv.ErrCompacted) {
		t.Fatalf("watch from a commit evicted for size: %+v, want ErrCompacted", r)
	}
	if r := <-h.Watch(ctx, nil, 2); r.Err != nil || len(r.Events) != 1 || r.Events[0].Rev != 2 {
		t.Fatalf("watch from the kept commit: %+v", r)
	}
}
