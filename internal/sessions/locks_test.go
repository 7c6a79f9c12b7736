package sessions

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// fileBytes is the size of the file the model covers byte by byte; one
// more position stands for everything past it (locks to the end of the
// file).
const fileBytes = 24

// lockModel is POSIX locking stated plainly: each byte has, per owner, no
// lock, a read lock or a write lock.
type lockModel map[Owner]*[fileBytes + 1]lockType

func (m lockModel) conflict(q request) bool {
	for o, bytes := range m {
		if o == q.owner {
			continue
		}
		for b := q.start; b <= min(q.end, fileBytes); b++ {
			if bytes[b] == writeLock || (bytes[b] == readLock && q.typ == writeLock) {
				return true
			}
		}
	}
	return false
}

func (m lockModel) apply(q request) {
	bytes := m[q.owner]
	if bytes == nil {
		bytes = new([fileBytes + 1]lockType)
		m[q.owner] = bytes
	}
	for b := q.start; b <= min(q.end, fileBytes); b++ {
		bytes[b] = q.typ
	}
}

// TestPOSIXLocksAgainstModel: random F_SETLK and F_GETLK by three owners
// of two sessions on one file; every answer and, after each operation,
// what each owner holds byte by byte match the model, and each owner's
// locks are split and merged as POSIX says (never overlapping, never two
// adjacent ones of one type).
func TestPOSIXLocksAgainstModel(t *testing.T) {
	owners := []Owner{{"a", 1}, {"a", 2}, {"b", 1}}
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		tab, model := NewTable(), lockModel{}
		for step := 0; step < 400; step++ {
			q := request{owner: owners[rng.Intn(len(owners))], typ: lockType(rng.Intn(3))}
			q.start = uint64(rng.Intn(fileBytes))
			if rng.Intn(4) == 0 {
				q.end = toEOF
			} else {
				q.end = q.start + uint64(rng.Intn(fileBytes-int(q.start)))
			}
			if rng.Intn(3) == 0 && q.typ != unlock {
				_, got := tab.Get(7, q)
				if want := model.conflict(q); got != want {
					t.Fatalf("seed %d step %d: GETLK %+v found a conflict: %v, the model: %v", seed, step, q, got, want)
				}
				continue
			}
			err := tab.Set(context.Background(), 7, q, false, "/f")
			want := q.typ != unlock && model.conflict(q)
			if want != kerr.Is(err, kerr.Locked) || (!want && err != nil) {
				t.Fatalf("seed %d step %d: SETLK %+v: %v; the model says conflict=%v", seed, step, q, err, want)
			}
			if !want {
				model.apply(q)
			}
			checkAgainstModel(t, tab, model, seed, step)
		}
	}
}

func checkAgainstModel(t *testing.T, tab *Table, model lockModel, seed int64, step int) {
	t.Helper()
	got := map[Owner]*[fileBytes + 1]lockType{}
	var f *fileLocks
	if f = tab.files[7]; f == nil {
		f = &fileLocks{}
	}
	for i, h := range f.posix {
		bytes := got[h.owner]
		if bytes == nil {
			bytes = new([fileBytes + 1]lockType)
			got[h.owner] = bytes
		}
		for b := h.start; b <= min(h.end, fileBytes); b++ {
			if bytes[b] != unlock {
				t.Fatalf("seed %d step %d: owner %v holds byte %d twice: %+v", seed, step, h.owner, b, f.posix)
			}
			bytes[b] = h.typ
		}
		for _, o := range f.posix[i+1:] {
			if o.owner == h.owner && o.typ == h.typ && adjacent(o, h) {
				t.Fatalf("seed %d step %d: adjacent locks of one type not merged: %+v and %+v", seed, step, h, o)
			}
		}
	}
	for o, want := range model {
		have := got[o]
		if have == nil {
			have = new([fileBytes + 1]lockType)
		}
		if *have != *want {
			t.Fatalf("seed %d step %d: owner %v holds %v, the model %v", seed, step, o, *have, *want)
		}
	}
}

// TestLockSplitAndMerge: the cases POSIX spells out.
func TestLockSplitAndMerge(t *testing.T) {
	ctx := context.Background()
	tab := NewTable()
	a := Owner{"s", 1}
	set := func(typ lockType, start, end uint64) {
		t.Helper()
		if err := tab.Set(ctx, 1, request{owner: a, typ: typ, start: start, end: end}, false, "/f"); err != nil {
			t.Fatal(err)
		}
	}
	set(writeLock, 0, 99)
	set(readLock, 40, 59) // splits the write lock in three
	if got := len(tab.files[1].posix); got != 3 {
		t.Fatalf("a read lock inside a write lock: %d locks, want 3: %+v", got, tab.files[1].posix)
	}
	set(writeLock, 40, 59) // merges them back
	if p := tab.files[1].posix; len(p) != 1 || p[0].start != 0 || p[0].end != 99 {
		t.Fatalf("the same type over the hole: %+v, want one lock [0, 99]", p)
	}
	set(unlock, 10, 19)
	if p := tab.files[1].posix; len(p) != 2 || p[0].end != 9 || p[1].start != 20 {
		t.Fatalf("unlock in the middle: %+v, want [0, 9] and [20, 99]", p)
	}
	set(writeLock, 100, toEOF) // adjacent: merged
	if p := tab.files[1].posix; len(p) != 2 || p[1].end != toEOF {
		t.Fatalf("adjacent lock to EOF: %+v", p)
	}
	set(unlock, 0, toEOF)
	if _, ok := tab.files[1]; ok {
		t.Fatalf("file still in the table after everything was released: %+v", tab.files[1])
	}
}

// TestLockWaitsAndWakes: a blocked F_SETLKW is granted when the lock in
// its way is released, not before; a cycle of waiters is a deadlock; a
// session's end releases its locks and wakes the others.
func TestLockWaitsAndWakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tab := NewTable()
	a, b := Owner{"A", 1}, Owner{"B", 1}
	if err := tab.Set(ctx, 1, request{owner: a, typ: writeLock, end: toEOF}, false, "/f"); err != nil {
		t.Fatal(err)
	}
	if err := tab.Set(ctx, 2, request{owner: b, typ: writeLock, end: toEOF}, false, "/g"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- tab.Set(ctx, 1, request{owner: b, typ: readLock, start: 5, end: 9}, true, "/f") }()
	waitFor(t, "B's request to block on /f", func() bool { tab.mu.Lock(); defer tab.mu.Unlock(); return tab.waiting[b] != nil })
	select {
	case err := <-got:
		t.Fatalf("B was answered while A holds the lock: %v", err)
	default:
	}
	// A waiting for /g, which B holds, while B waits for A: EDEADLK.
	if err := tab.Set(ctx, 2, request{owner: a, typ: readLock, end: toEOF}, true, "/g"); !kerr.Is(err, kerr.Deadlock) {
		t.Fatalf("a cycle of waiters: %v, want a deadlock error", err)
	}
	if err := tab.Set(ctx, 1, request{owner: a, typ: unlock, start: 0, end: 6}, false, "/f"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("B was granted [5, 9] while A still holds [7, EOF): %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if n := tab.ReleaseSession("A", nil); n != 1 {
		t.Fatalf("A's end released %d locks, want 1", n)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("B's F_SETLKW was not granted after A's session ended")
	}
	if l, busy := tab.Get(1, request{owner: a, typ: writeLock, start: 0, end: toEOF}); !busy || l.Session != "B" || l.Start != 5 || l.Len != 5 {
		t.Fatalf("GETLK after the grant: %+v %v, want B's [5, 9]", l, busy)
	}
}

// TestFlock: flocks are whole-file, shared or exclusive, and do not
// conflict with POSIX locks; upgrading drops the shared lock first.
func TestFlock(t *testing.T) {
	ctx := context.Background()
	tab := NewTable()
	a, b := Owner{"A", 1}, Owner{"B", 1}
	fl := func(o Owner, typ lockType) request { return request{owner: o, flock: true, typ: typ, end: toEOF} }
	for _, o := range []Owner{a, b} {
		if err := tab.Set(ctx, 1, fl(o, readLock), false, "/f"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tab.Set(ctx, 1, fl(a, writeLock), false, "/f"); !kerr.Is(err, kerr.Locked) {
		t.Fatalf("LOCK_EX|LOCK_NB while another holds LOCK_SH: %v", err)
	}
	if err := tab.Set(ctx, 1, request{owner: a, typ: writeLock, end: toEOF}, false, "/f"); err != nil {
		t.Fatalf("a POSIX lock beside flocks: %v", err)
	}
	if err := tab.Set(ctx, 1, fl(b, writeLock), false, "/f"); err != nil {
		t.Fatalf("B upgrades once A's failed upgrade dropped its shared lock: %v", err)
	}
}

// TestLockRequestOf: ranges and their limits.
func TestLockRequestOf(t *testing.T) {
	q, err := requestOf("s", nsapi.LockRequest{Path: "/f", Type: "write", Start: 10, Len: 5})
	if err != nil || q.start != 10 || q.end != 14 {
		t.Fatalf("start 10 len 5: %+v %v", q, err)
	}
	if _, err := requestOf("s", nsapi.LockRequest{Path: "/f", Type: "write", Start: 2, Len: toEOF}); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("a range past the largest offset: %v", err)
	}
	if _, err := requestOf("s", nsapi.LockRequest{Path: "/f", Type: "exclusive"}); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("an unknown type: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
