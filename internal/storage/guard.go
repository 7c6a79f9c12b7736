package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// The I/O guard. A filesystem can stop answering without failing: a
// ceph-fuse mount whose cluster is down or frozen blocks every system
// call (statfs, open, write, fsync) until the cluster is back; an NFS
// hard mount does the same. The storage server never waits on one longer
// than its I/O deadline (Config.IOTimeout): a call still running then is
// left to finish on its own, its caller gets kerr.Unavailable, and the
// filesystem is offline (reported in heartbeats, so nothing new is placed
// on it and `fs ls` says why) until every such call has returned and its
// identity checks out again. Calls on a filesystem with a hung call fail
// at once instead of hanging one more client for the deadline.
//
// The heartbeat asks its questions (usage, identity, info) as probes: at
// most one of each in flight per filesystem, waited for briefly, so a hung
// filesystem never delays the heartbeat of the others.

// DefaultIOTimeout is the default I/O deadline: longer than the pauses a
// healthy Ceph cluster makes while it recovers from an OSD failure (the
// OSD marked down, its placement groups peered elsewhere: seconds).
const DefaultIOTimeout = time.Minute

// guard runs the calls on one filesystem's store.
type guard struct {
	root    string
	timeout time.Duration // 0: calls run without a deadline

	mu     sync.Mutex
	stuck  map[*call]struct{} // past their deadline, still running
	probes map[string]*call   // heartbeat probes in flight, by name
	full   string             // why the last write was refused for space ("" after a write went through)
	fullAt time.Time
	down   string // why the last call failed as unavailable ("" after a call went through)
	downAt time.Time

	io *ioStats // every call is timed here (latency.go); nil: not
}

type call struct {
	op       string
	start    time.Time
	done     chan struct{}
	err      error
	finished bool // under guard.mu
}

func newGuard(root string, timeout time.Duration) *guard {
	return &guard{root: root, timeout: timeout, stuck: map[*call]struct{}{}, probes: map[string]*call{}}
}

// start runs fn in a goroutine; late, if not nil, runs after fn when
// fn returned past the deadline (its caller gave up: undo what fn made).
func (g *guard) start(op string, fn func() error, late func()) *call {
	c := &call{op: op, start: time.Now(), done: make(chan struct{})}
	go func() {
		err := fn()
		g.mu.Lock()
		c.err, c.finished = err, true
		_, gaveUp := g.stuck[c]
		delete(g.stuck, c)
		if g.probes[op] == c {
			delete(g.probes, op)
		}
		if gaveUp && kerr.Is(err, kerr.Unavailable) {
			// It came back only to say the storage is unavailable (a
			// RADOS operation past its own timeout): still offline.
			g.down, g.downAt = reason(err), time.Now()
		}
		g.mu.Unlock()
		close(c.done)
		if gaveUp && late != nil {
			late()
		}
	}()
	return c
}

// run runs fn and waits for it at most the deadline. ok is false when
// fn has not returned (then nothing fn sets may be read: it still runs);
// err is then kerr.Unavailable.
func (g *guard) run(op string, fn func() error, late func()) (ok bool, err error) {
	return g.runN(op, 0, fn, late)
}

// runN is run for a call that moves n bytes; it is timed (a call left
// running past the deadline counts as taking the deadline; one refused
// because the filesystem hangs is not counted).
func (g *guard) runN(op string, n int64, fn func() error, late func()) (ok bool, err error) {
	t0 := time.Now()
	if g.timeout <= 0 {
		err = fn()
		g.io.record(op, n, time.Since(t0), failed(err))
		return true, err
	}
	if why := g.hung(); why != "" {
		return false, kerr.New(kerr.Unavailable, op, g.root, "filesystem is offline: "+why)
	}
	c := g.start(op, fn, late)
	t := time.NewTimer(g.timeout)
	defer t.Stop()
	select {
	case <-c.done:
		g.io.record(op, n, time.Since(t0), failed(c.err))
		return true, g.answered(c.err)
	case <-t.C:
	}
	g.mu.Lock()
	if c.finished {
		g.mu.Unlock()
		g.io.record(op, n, time.Since(t0), failed(c.err))
		return true, g.answered(c.err)
	}
	g.stuck[c] = struct{}{}
	g.mu.Unlock()
	g.io.record(op, n, time.Since(t0), true)
	return false, kerr.New(kerr.Unavailable, op, g.root,
		fmt.Sprintf("the filesystem did not answer within %v; it is offline until it does", g.timeout))
}

// failed says whether a call's error counts as a failure (end of file
// does not).
func failed(err error) bool { return err != nil && !errors.Is(err, io.EOF) }

// do is run for calls that leave nothing to undo and whose results are
// only read when they returned.
func (g *guard) do(op string, fn func() error) error {
	_, err := g.run(op, fn, nil)
	return err
}

// probe runs fn as the heartbeat's question name and waits for it at
// most wait. It reports whether fn ran to its end within the wait; when
// the last such question is still running, no new one is asked (false).
// Only then may the caller read what fn found.
func (g *guard) probe(name string, wait time.Duration, fn func()) bool {
	if g.timeout <= 0 {
		fn()
		return true
	}
	g.mu.Lock()
	if g.probes[name] != nil {
		g.mu.Unlock()
		return false
	}
	c := g.start(name, func() error { fn(); return nil }, nil)
	g.probes[name] = c // removed by start's goroutine (it needs g.mu first)
	g.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// hung says which call has been running past the deadline ("" if none).
func (g *guard) hung() string {
	if g.timeout <= 0 {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var oldest *call
	for c := range g.stuck {
		if oldest == nil || c.start.Before(oldest.start) {
			oldest = c
		}
	}
	for _, c := range g.probes {
		if time.Since(c.start) > g.timeout && (oldest == nil || c.start.Before(oldest.start)) {
			oldest = c
		}
	}
	if oldest == nil {
		return ""
	}
	return fmt.Sprintf("I/O hangs: %s has not returned for %v (deadline %v)", oldest.op,
		time.Since(oldest.start).Round(time.Second), g.timeout)
}

// answered records whether a call the store answered says the storage
// system is unavailable (a RADOS operation past its own timeout, a FUSE
// daemon gone): the filesystem is offline until a call goes through or
// for downHold.
func (g *guard) answered(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case kerr.Is(err, kerr.Unavailable):
		g.down, g.downAt = reason(err), time.Now()
	case err == nil:
		g.down = ""
	}
	return err
}

// downHold is how long a filesystem whose storage answered "unavailable"
// stays offline without a call proving otherwise.
const downHold = 30 * time.Second

// downReason says why the filesystem counts as unavailable ("" if not).
func (g *guard) downReason() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down == "" || time.Since(g.downAt) > downHold {
		return ""
	}
	return g.down
}

// offline says why the filesystem cannot be used now: a call hangs, or
// the storage said it is unavailable ("" if neither).
func (g *guard) offline() string {
	if why := g.hung(); why != "" {
		return why
	}
	if why := g.downReason(); why != "" {
		return "unavailable: " + why
	}
	return ""
}

// fullHold is how long a filesystem that refused a write for lack of
// space is reported full (and so gets no new files) without a write
// proving otherwise; then placement tries it again.
const fullHold = 30 * time.Second

// noted records the outcome of a write: refused for space, or through.
func (g *guard) noted(err error) error {
	switch {
	case kerr.Is(err, kerr.NoSpace) || kerr.Is(err, kerr.Quota):
		g.mu.Lock()
		g.full, g.fullAt = reason(err), time.Now()
		g.mu.Unlock()
	case err == nil:
		g.mu.Lock()
		g.full = ""
		g.mu.Unlock()
	}
	return err
}

// fullReason says why the filesystem counts as full ("" if it does not).
func (g *guard) fullReason() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.full == "" || time.Since(g.fullAt) > fullHold {
		return ""
	}
	return g.full
}

// guarded is a store whose every call runs under its guard.
type guarded struct {
	backend.Store
	g *guard
	// sendfile lets readers hand their file to the kernel; only for local
	// disks, where a read cannot hang past the guard.
	sendfile func() bool
}

func (s *guarded) Create(fid uint64, o backend.CreateOptions) (backend.Writer, error) {
	var w backend.Writer
	ok, err := s.g.run("create", func() (err error) { w, err = s.Store.Create(fid, o); return err },
		func() {
			if w != nil {
				w.Abort() // made after the deadline: nobody writes it
			}
		})
	if !ok || err != nil {
		return nil, s.g.noted(err)
	}
	return &guardedWriter{w: w, g: s.g}, nil
}

func (s *guarded) Open(fid uint64) (backend.Reader, error) {
	var r backend.Reader
	ok, err := s.g.run("open", func() (err error) { r, err = s.Store.Open(fid); return err },
		func() {
			if r != nil {
				r.Close()
			}
		})
	if !ok || err != nil {
		return nil, err
	}
	local := s.sendfile()
	gr := &guardedReader{r: r, g: s.g, direct: local}
	if of, ok := r.(backend.OSFile); ok && local {
		return &guardedOSReader{guardedReader: gr, of: of}, nil
	}
	return gr, nil
}

func (s *guarded) ReadMeta(fid uint64) (backend.Meta, error) {
	var m backend.Meta
	if ok, err := s.g.run("read metadata", func() (err error) { m, err = s.Store.ReadMeta(fid); return err }, nil); !ok || err != nil {
		return backend.Meta{}, err
	}
	return m, nil
}

func (s *guarded) Remove(fid uint64) error {
	return s.g.do("remove", func() error { return s.Store.Remove(fid) })
}

// Rewrite is a large operation when p is.
func (s *guarded) Rewrite(fid uint64, off int64, p []byte) error {
	_, err := s.g.runN("rewrite", int64(len(p)), func() error { return s.Store.Rewrite(fid, off, p) }, nil)
	return s.g.noted(err)
}

func (s *guarded) AddBlockSums(fid uint64, bs int, sums []uint32, length int64) error {
	return s.g.noted(s.g.do("add block sums", func() error { return s.Store.AddBlockSums(fid, bs, sums, length) }))
}

func (s *guarded) MarkDamaged(fid uint64, why string) error {
	return s.g.do("mark damaged", func() error { return s.Store.MarkDamaged(fid, why) })
}

func (s *guarded) Identity() (backend.Identity, error) {
	var id backend.Identity
	if ok, err := s.g.run("identity", func() (err error) { id, err = s.Store.Identity(); return err }, nil); !ok || err != nil {
		return backend.Identity{}, err
	}
	return id, nil
}

func (s *guarded) Initialize(id backend.Identity) error {
	return s.g.do("initialize", func() error { return s.Store.Initialize(id) })
}

func (s *guarded) Configure(set backend.Settings) error {
	return s.g.do("configure", func() error { return s.Store.Configure(set) })
}

func (s *guarded) CheckIdentity(want backend.Identity) string {
	var why string
	if ok, err := s.g.run("identity check", func() error { why = s.Store.CheckIdentity(want); return nil }, nil); !ok {
		return reason(err)
	}
	return why
}

var _ erasure.AlignedWriter = (*guardedWriter)(nil)

// guardedWriter writes one stripe under the guard.
type guardedWriter struct {
	w       backend.Writer
	g       *guard
	written int64
}

func (w *guardedWriter) Write(p []byte) (int, error) {
	return w.write(len(p), func() (int, error) { return w.w.Write(p) })
}

// write runs one write of size bytes under the guard.
func (w *guardedWriter) write(size int, fn func() (int, error)) (int, error) {
	var n int
	if ok, err := w.g.runN("write", int64(size), func() (err error) { n, err = fn(); return err }, nil); !ok || err != nil {
		if !ok {
			n = 0
		}
		return n, w.g.noted(err)
	}
	w.written += int64(n)
	w.g.noted(nil)
	return n, nil
}

// WriteFrom passes a frame written from the erasure writer's buffer on
// (erasure.AlignedWriter). A call the guard gives up on may still copy
// into b[:lead] later: the erasure writer never recycles the buffers of
// a write that failed.
func (w *guardedWriter) WriteFrom(b []byte, lead int) (int, error) {
	aw, ok := w.w.(erasure.AlignedWriter)
	if !ok {
		return w.Write(b[lead:])
	}
	return w.write(len(b)-lead, func() (int, error) { return aw.WriteFrom(b, lead) })
}

// DataCRC32C is the stripe's (backend.CRC32CWriter): no I/O, no guard.
func (w *guardedWriter) DataCRC32C() (uint32, bool) {
	if cw, ok := w.w.(backend.CRC32CWriter); ok {
		return cw.DataCRC32C()
	}
	return 0, false
}

// Finish is a large operation when the stripe is (it makes it durable).
func (w *guardedWriter) Finish(m backend.Meta) error {
	_, err := w.g.runN("finish", w.written, func() error { return w.w.Finish(m) }, nil)
	return w.g.noted(err)
}

// Abort waits no longer than any other call (and not at all on a
// filesystem already known to hang: the stripe stays for fsck then).
func (w *guardedWriter) Abort() { w.g.do("abort", func() error { w.w.Abort(); return nil }) }

// guardedReader reads one stripe under the guard.
type guardedReader struct {
	r backend.Reader
	g *guard
	// direct reads straight into the caller's buffer, timed but not
	// bounded: a local disk, whose reads cannot hang past the guard (as
	// sendfile is allowed there). A bounded read needs a buffer of its
	// own and a copy, which cost a verified read from a cold page cache
	// as much again (docs/DESIGN-NOTES.md, block checksums).
	direct bool
}

// ReadAt reads into a buffer of its own, unless direct: a read left
// running past the deadline must not write into p after the caller got
// it back.
func (r *guardedReader) ReadAt(p []byte, off int64) (int, error) {
	if r.g.timeout <= 0 || r.direct {
		t0 := time.Now()
		n, err := r.r.ReadAt(p, off)
		r.g.io.record("read", int64(len(p)), time.Since(t0), failed(err))
		return n, err
	}
	bp := readBufs.Get().(*[]byte)
	if cap(*bp) < len(p) {
		*bp = make([]byte, len(p))
	}
	buf := (*bp)[:len(p)]
	var n int
	ok, err := r.g.runN("read", int64(len(p)), func() (err error) { n, err = r.r.ReadAt(buf, off); return err }, nil)
	if !ok {
		return 0, err // buf may still be written: not reused
	}
	copy(p, buf[:n])
	readBufs.Put(bp)
	if errors.Is(err, io.EOF) {
		return n, io.EOF // unwrapped: callers compare
	}
	return n, err
}

var readBufs = sync.Pool{New: func() any { return new([]byte) }}

func (r *guardedReader) Size() int64     { return r.r.Size() }
func (r *guardedReader) BlockSums() bool { return r.r.BlockSums() }
func (r *guardedReader) Damaged() string { return r.r.Damaged() }

func (r *guardedReader) Close() error { return r.g.do("close", r.r.Close) }

type guardedOSReader struct {
	*guardedReader
	of     backend.OSFile
	handed atomic.Bool // the file went to the kernel (sendfile)
}

func (r *guardedOSReader) OSFile() *os.File { r.handed.Store(true); return r.of.OSFile() }

// Close counts what the kernel sent from the file (up to the furthest
// offset served: the reads themselves are not seen).
func (r *guardedOSReader) Close() error {
	if r.handed.Load() {
		if off, err := r.of.OSFile().Seek(0, io.SeekCurrent); err == nil && off > 0 {
			r.g.io.sent(off)
		}
	}
	return r.guardedReader.Close()
}
