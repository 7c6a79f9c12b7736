package sessions

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// toEOF is the end of a lock that reaches the end of the file, whatever
// its size (a length of 0).
const toEOF = math.MaxUint64

// Owner owns locks: a lock owner (a process for POSIX locks, an open
// file for flock) within a session.
type Owner struct {
	Session string
	ID      uint64
}

// lockType is a held or requested lock's type (0: unlock).
type lockType uint8

const (
	unlock lockType = iota
	readLock
	writeLock
)

func (t lockType) String() string {
	switch t {
	case readLock:
		return nsapi.LockRead
	case writeLock:
		return nsapi.LockWrite
	}
	return nsapi.LockUnlock
}

// request is a lock operation on one file, in the table's terms.
type request struct {
	owner      Owner
	flock      bool // a flock (whole file, its own space); else POSIX
	typ        lockType
	start, end uint64 // inclusive; end toEOF: to the end of the file
	pid        uint32
}

// requestOf reads r (whose owner is in session).
func requestOf(session string, r nsapi.LockRequest) (request, error) {
	q := request{owner: Owner{session, r.Owner}, pid: r.Pid}
	switch r.Kind {
	case "", nsapi.LockPOSIX:
	case nsapi.LockFlock:
		q.flock = true
	default:
		return q, kerr.New(kerr.Invalid, "lock", r.Path, fmt.Sprintf("lock kind %q is neither posix nor flock", r.Kind))
	}
	switch r.Type {
	case nsapi.LockRead:
		q.typ = readLock
	case nsapi.LockWrite:
		q.typ = writeLock
	case nsapi.LockUnlock:
	default:
		return q, kerr.New(kerr.Invalid, "lock", r.Path, fmt.Sprintf("lock type %q is not read, write or unlock", r.Type))
	}
	q.start, q.end = r.Start, toEOF
	if q.flock {
		q.start = 0
	} else if r.Len > 0 {
		if r.Len-1 > toEOF-r.Start {
			return q, kerr.New(kerr.Invalid, "lock", r.Path, "the range ends past the largest offset")
		}
		q.end = r.Start + r.Len - 1
	}
	return q, nil
}

// held is a lock held.
type held struct {
	owner      Owner
	typ        lockType
	start, end uint64
	pid        uint32
}

func (h held) overlaps(start, end uint64) bool { return h.start <= end && start <= h.end }

// conflicts reports whether h is in the way of q.
func (h held) conflicts(q request) bool {
	return q.typ != unlock && h.owner != q.owner && h.overlaps(q.start, q.end) && (h.typ == writeLock || q.typ == writeLock)
}

// lock is h on file ino in the vocabulary.
func (h held) lock(ino uint64, flock bool) nsapi.Lock {
	l := nsapi.Lock{Ino: ino, Kind: nsapi.LockPOSIX, Type: h.typ.String(), Start: h.start, Owner: h.owner.ID, Pid: h.pid, Session: h.owner.Session}
	if flock {
		l.Kind = nsapi.LockFlock
	}
	if h.end != toEOF {
		l.Len = h.end - h.start + 1
	}
	return l
}

// fileLocks are the locks of one file and the requests waiting for them.
type fileLocks struct {
	posix   []held // sorted by start
	flock   []held // whole file, one per owner at most
	waiters []*waiter
}

func (f *fileLocks) empty() bool {
	return len(f.posix) == 0 && len(f.flock) == 0 && len(f.waiters) == 0
}

// conflict is the first lock in q's way, if any.
func (f *fileLocks) conflict(q request) (held, bool) {
	list := f.posix
	if q.flock {
		list = f.flock
	}
	for _, h := range list {
		if h.conflicts(q) {
			return h, true
		}
	}
	return held{}, false
}

// apply sets (or, typ unlock, releases) q's range for its owner, as POSIX
// says: the owner's locks in the range are replaced, split where the
// range cuts them, and adjacent or overlapping locks of the owner of one
// type are merged. A flock replaces the owner's flock.
func (f *fileLocks) apply(q request) {
	if q.flock {
		f.flock = slices.DeleteFunc(f.flock, func(h held) bool { return h.owner == q.owner })
		if q.typ != unlock {
			f.flock = append(f.flock, held{owner: q.owner, typ: q.typ, start: 0, end: toEOF, pid: q.pid})
		}
		return
	}
	out := make([]held, 0, len(f.posix)+2)
	for _, h := range f.posix {
		if h.owner != q.owner || !h.overlaps(q.start, q.end) {
			out = append(out, h)
			continue
		}
		if h.start < q.start {
			l := h
			l.end = q.start - 1
			out = append(out, l)
		}
		if h.end > q.end {
			r := h
			r.start = q.end + 1
			out = append(out, r)
		}
	}
	if q.typ != unlock {
		n := held{owner: q.owner, typ: q.typ, start: q.start, end: q.end, pid: q.pid}
		kept := out[:0]
		for _, h := range out {
			if h.owner == q.owner && h.typ == n.typ && adjacent(h, n) {
				n.start, n.end = min(n.start, h.start), max(n.end, h.end)
				continue
			}
			kept = append(kept, h)
		}
		out = append(kept, n)
	}
	slices.SortFunc(out, func(a, b held) int {
		switch {
		case a.start != b.start:
			return cmpU(a.start, b.start)
		case a.owner.Session != b.owner.Session:
			if a.owner.Session < b.owner.Session {
				return -1
			}
			return 1
		}
		return cmpU(a.owner.ID, b.owner.ID)
	})
	f.posix = out
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// adjacent reports whether a and b overlap or touch.
func adjacent(a, b held) bool {
	return a.overlaps(b.start, b.end) || (a.end != toEOF && a.end+1 == b.start) || (b.end != toEOF && b.end+1 == a.start)
}

// waiter is a blocked F_SETLKW or flock without LOCK_NB.
type waiter struct {
	ino       uint64
	q         request
	done      chan error // receives once: nil when granted
	blockedBy Owner      // the owner of the lock in its way (deadlock detection)
}

// Table is the lock table of a namespace service: POSIX byte-range locks
// and flocks on files (by inode), owned by (session, owner). It is safe
// for concurrent use.
type Table struct {
	mu      sync.Mutex
	files   map[uint64]*fileLocks
	waiting map[Owner]*waiter // blocked POSIX requests by owner
	// bySession counts the locks and waiters of each session on each
	// file, to release them when it ends.
	bySession map[string]map[uint64]struct{}
}

// NewTable returns an empty lock table.
func NewTable() *Table {
	return &Table{files: map[uint64]*fileLocks{}, waiting: map[Owner]*waiter{}, bySession: map[string]map[uint64]struct{}{}}
}

func (t *Table) file(ino uint64) *fileLocks {
	f := t.files[ino]
	if f == nil {
		f = &fileLocks{}
		t.files[ino] = f
	}
	return f
}

func (t *Table) note(session string, ino uint64) {
	m := t.bySession[session]
	if m == nil {
		m = map[uint64]struct{}{}
		t.bySession[session] = m
	}
	m[ino] = struct{}{}
}

// tidy forgets file ino when nothing is held or awaited on it.
func (t *Table) tidy(ino uint64, f *fileLocks) {
	if f.empty() {
		delete(t.files, ino)
	}
}

// Set sets or releases a lock on file ino. A lock in the way fails it
// with kerr.Locked, unless wait: then it waits until it can be granted,
// ctx ends (its error), or waiting would never end (kerr.Deadlock: the
// holder waits, directly or not, for a lock of the requester).
func (t *Table) Set(ctx context.Context, ino uint64, q request, wait bool, what string) error {
	t.mu.Lock()
	f := t.file(ino)
	if q.flock && q.typ != unlock && slices.ContainsFunc(f.flock, func(h held) bool { return h.owner == q.owner }) {
		// Converting a flock drops the one held first, as Linux does (two
		// holders of shared locks that both upgrade do not deadlock).
		f.apply(request{owner: q.owner, flock: true})
		t.wakeLocked(ino, f)
		f = t.file(ino)
	}
	h, busy := f.conflict(q)
	if !busy {
		f.apply(q)
		t.note(q.owner.Session, ino)
		t.wakeLocked(ino, f)
		t.mu.Unlock()
		return nil
	}
	if !wait {
		t.tidy(ino, f)
		t.mu.Unlock()
		return kerr.New(kerr.Locked, "lock", what, fmt.Sprintf("%s lock %s held by owner %d of session %s", h.typ, rangeText(h.start, h.end), h.owner.ID, h.owner.Session))
	}
	if !q.flock && t.deadlocks(q.owner, h.owner) {
		t.tidy(ino, f)
		t.mu.Unlock()
		return kerr.New(kerr.Deadlock, "lock", what, fmt.Sprintf("waiting for owner %d of session %s, which waits for this owner", h.owner.ID, h.owner.Session))
	}
	w := &waiter{ino: ino, q: q, done: make(chan error, 1), blockedBy: h.owner}
	f.waiters = append(f.waiters, w)
	if !q.flock {
		t.waiting[q.owner] = w
	}
	t.note(q.owner.Session, ino)
	t.mu.Unlock()
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case err := <-w.done: // granted (or ended) meanwhile
		return err
	default:
	}
	t.dropWaiter(w)
	return kerr.Wrap(kerr.Aborted, "lock", what, ctx.Err())
}

// deadlocks reports whether blocking owner on holder closes a cycle of
// POSIX waiters.
func (t *Table) deadlocks(owner, holder Owner) bool {
	for i := 0; i <= len(t.waiting); i++ {
		if holder == owner {
			return true
		}
		w := t.waiting[holder]
		if w == nil {
			return false
		}
		holder = w.blockedBy
	}
	return false
}

func (t *Table) dropWaiter(w *waiter) {
	if f := t.files[w.ino]; f != nil {
		f.waiters = slices.DeleteFunc(f.waiters, func(x *waiter) bool { return x == w })
		t.tidy(w.ino, f)
	}
	if !w.q.flock && t.waiting[w.q.owner] == w {
		delete(t.waiting, w.q.owner)
	}
}

// wakeLocked grants the waiters of f that nothing is in the way of any
// more, in the order they came.
func (t *Table) wakeLocked(ino uint64, f *fileLocks) {
	for granted := true; granted; {
		granted = false
		for _, w := range f.waiters {
			if h, busy := f.conflict(w.q); busy {
				w.blockedBy = h.owner
				continue
			}
			f.apply(w.q)
			t.dropWaiter(w)
			w.done <- nil
			granted = true
			break
		}
	}
	t.tidy(ino, f)
}

// Get returns the first lock in the way of q on file ino (F_GETLK), if
// any.
func (t *Table) Get(ino uint64, q request) (nsapi.Lock, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.files[ino]
	if f == nil {
		return nsapi.Lock{}, false
	}
	h, busy := f.conflict(q)
	if !busy {
		return nsapi.Lock{}, false
	}
	return h.lock(ino, q.flock), true
}

// Reclaim grants q on file ino to a session reclaiming what it held in
// an earlier incarnation: granted unless another reclaim took it.
func (t *Table) Reclaim(ino uint64, q request) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.file(ino)
	if _, busy := f.conflict(q); busy {
		t.tidy(ino, f)
		return false
	}
	f.apply(q)
	t.note(q.owner.Session, ino)
	return true
}

// ReleaseSession releases every lock of session and fails its waiters
// with err; it returns how many locks it held.
func (t *Table) ReleaseSession(session string, err error) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for ino := range t.bySession[session] {
		f := t.files[ino]
		if f == nil {
			continue
		}
		for _, w := range slices.Clone(f.waiters) {
			if w.q.owner.Session == session {
				t.dropWaiter(w)
				w.done <- err
			}
		}
		before := len(f.posix) + len(f.flock)
		mine := func(h held) bool { return h.owner.Session == session }
		f.posix = slices.DeleteFunc(f.posix, mine)
		f.flock = slices.DeleteFunc(f.flock, mine)
		n += before - len(f.posix) - len(f.flock)
		t.wakeLocked(ino, f)
	}
	delete(t.bySession, session)
	return n
}

// ReleaseFile releases every lock on file ino (fusex droplocks); its
// waiters are granted in turn. It returns how many were released.
func (t *Table) ReleaseFile(ino uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.files[ino]
	if f == nil {
		return 0
	}
	n := len(f.posix) + len(f.flock)
	f.posix, f.flock = nil, nil
	t.wakeLocked(ino, f)
	return n
}

// Locked reports whether a lock is held on file ino.
func (t *Table) Locked(ino uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.files[ino]
	return f != nil && len(f.posix)+len(f.flock) > 0
}

// Held returns the locks session holds.
func (t *Table) Held(session string) []nsapi.Lock {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []nsapi.Lock
	for ino := range t.bySession[session] {
		f := t.files[ino]
		if f == nil {
			continue
		}
		for _, h := range f.posix {
			if h.owner.Session == session {
				out = append(out, h.lock(ino, false))
			}
		}
		for _, h := range f.flock {
			if h.owner.Session == session {
				out = append(out, h.lock(ino, true))
			}
		}
	}
	return out
}

// OwnerLocks returns the locks owner holds on file ino (POSIX ones, or
// its flock).
func (t *Table) OwnerLocks(ino uint64, owner Owner, flock bool) []nsapi.Lock {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.files[ino]
	if f == nil {
		return nil
	}
	list := f.posix
	if flock {
		list = f.flock
	}
	var out []nsapi.Lock
	for _, h := range list {
		if h.owner == owner {
			out = append(out, h.lock(ino, flock))
		}
	}
	return out
}

// Count returns how many locks each session holds.
func (t *Table) Count() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for _, f := range t.files {
		for _, h := range f.posix {
			out[h.owner.Session]++
		}
		for _, h := range f.flock {
			out[h.owner.Session]++
		}
	}
	return out
}

func rangeText(start, end uint64) string {
	if end == toEOF {
		return fmt.Sprintf("[%d, EOF)", start)
	}
	return fmt.Sprintf("[%d, %d]", start, end)
}
