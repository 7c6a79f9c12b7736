package mount

import (
	"context"
	"io"
	"os"
	"sort"
	"sync"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// A journal is the write-back state of one file open for writing: the
// bytes written since the last flush, kept at their offsets in a sparse
// file of the mount's cache directory, the ranges they cover, and the
// size changes (truncations) made meanwhile. Reads see the journal over
// the remote content. Flush (fsync, close) replays it on the file in
// the namespace in order: a truncation below the remote size first, then
// each dirty range as one ranged PUT (an update of the file in place,
// which keeps its inode), then the final size if it differs — or, for a
// file written whole from empty, as one upload that rewrites it. What flush
// returned successfully is on the storage servers; until then it is in
// the journal file, which survives a storage server restart.
type journal struct {
	mu    sync.Mutex
	f     *os.File
	dirty []extent // sorted, disjoint, not adjacent
	size  int64    // the file's size as its writers see it
	base  int64    // the remote file's size
	cut   int64    // smallest size truncated to since the last flush (-1: none)
	// changes counts the requests Flush sent that change the file
	// (truncations, ranged PUTs), failed ones too (a lost answer may be
	// a committed change): each commits at most one data version.
	changes int
	// The streamed upload of a file written from its start (stream.go):
	// streamable is set by the open when the file may be replaced by one
	// (empty, the caller's); st is the one under way; streamed: one was
	// started (one per journal).
	streamable, streamed bool
	st                   *stream
	count                func(name string) // the mount's counters (nil: none)
}

type extent struct{ off, end int64 }

func newJournal(dir string, size int64) (*journal, error) {
	f, err := os.CreateTemp(dir, "journal-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name()) // lives as long as it is open
	return &journal{f: f, size: size, base: size, cut: -1}, nil
}

func (j *journal) close() {
	j.mu.Lock()
	j.dropStream()
	j.mu.Unlock()
	j.f.Close()
}

// dropStream aborts the stream under way, if any, without waiting for
// its end (a flush replays over it only once it ended: finishStream).
// Caller holds j.mu.
func (j *journal) dropStream() {
	if j.st != nil {
		j.st.abort(false)
		j.st = nil
		j.counter("stream_aborted")
	}
}

func (j *journal) counter(name string) {
	if j.count != nil {
		j.count(name)
	}
}

// prefix is where the journal's bytes written from offset 0 without a
// hole end. Caller holds j.mu.
func (j *journal) prefix() int64 {
	if len(j.dirty) > 0 && j.dirty[0].off == 0 {
		return j.dirty[0].end
	}
	return 0
}

// stream starts the streamed upload of the file (through the rewriter
// and for the path up gives) once it is written from its start far
// enough (streamMin), if the open allowed it, the file is empty on the
// servers and the server rewrites files.
func (j *journal) stream(up func() (rewriter, string)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.streamable || j.streamed || j.base != 0 || j.prefix() < streamMin {
		return
	}
	j.streamed = true
	rw, path := up()
	if rw == nil {
		return
	}
	j.st = startStream(rw, j.f, path, j.prefix())
	j.counter("stream_started")
}

// Size is the file's size as its writers see it.
func (j *journal) Size() int64 { j.mu.Lock(); defer j.mu.Unlock(); return j.size }

// Dirty reports whether the journal holds changes not flushed.
func (j *journal) Dirty() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.dirtyLocked()
}

func (j *journal) dirtyLocked() bool { return len(j.dirty) > 0 || j.cut >= 0 || j.size != j.base }

// WriteAt journals p at off.
func (j *journal) WriteAt(p []byte, off int64) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	n, err := j.f.WriteAt(p, off)
	if n > 0 {
		j.add(extent{off, off + int64(n)})
		j.size = max(j.size, off+int64(n))
	}
	if j.st != nil && (err != nil || !j.st.wrote(off, j.prefix())) {
		j.dropStream()
	}
	return n, err
}

// add merges e into the dirty ranges.
func (j *journal) add(e extent) {
	out := j.dirty[:0:0]
	for _, d := range j.dirty {
		if d.end < e.off || d.off > e.end {
			out = append(out, d)
			continue
		}
		e = extent{min(d.off, e.off), max(d.end, e.end)}
	}
	out = append(out, e)
	sort.Slice(out, func(a, b int) bool { return out[a].off < out[b].off })
	j.dirty = out
}

// Truncate sets the size.
func (j *journal) Truncate(size int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dropStream()
	if size < j.size {
		out := j.dirty[:0]
		for _, d := range j.dirty {
			if d.off >= size {
				continue
			}
			d.end = min(d.end, size)
			out = append(out, d)
		}
		j.dirty = out
		if j.cut < 0 || size < j.cut {
			j.cut = size
		}
	}
	if err := j.f.Truncate(size); err != nil {
		return err
	}
	j.size = size
	return nil
}

// rebase applies a change of the remote file made elsewhere (now size
// bytes long): reads of what is not journaled see it; the writers' size
// follows it unless they set one themselves (a truncation, or writes
// beyond it).
func (j *journal) rebase(size int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dropStream()
	switch {
	case j.cut >= 0: // truncated here: the writers' size stands
	case j.size > j.base: // extended here
		j.size = max(j.size, size)
	default:
		end := int64(0)
		if len(j.dirty) > 0 {
			end = j.dirty[len(j.dirty)-1].end
		}
		j.size = max(size, end)
	}
	j.base = size
}

// ReadAt reads p at off: journaled bytes from the journal, others from
// remote (below the remote size that no truncation cut), zeros beyond.
func (j *journal) ReadAt(ctx context.Context, p []byte, off int64, remote func(context.Context, []byte, int64) (int, error)) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if off >= j.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), j.size-off)]
	rb := j.base
	if j.cut >= 0 {
		rb = min(rb, j.cut)
	}
	end := off + int64(len(p))
	pos := off
	fill := func(to int64) error { // bytes pos..to not journaled
		if pos >= to {
			return nil
		}
		seg := p[pos-off : to-off]
		clear(seg)
		if pos < rb {
			r := seg[:min(to, rb)-pos]
			n, err := remote(ctx, r, pos)
			if err != nil && err != io.EOF {
				return err
			}
			clear(r[n:])
		}
		pos = to
		return nil
	}
	for _, d := range j.dirty {
		if d.end <= pos || d.off >= end {
			continue
		}
		if err := fill(max(d.off, pos)); err != nil {
			return 0, err
		}
		to := min(d.end, end)
		if _, err := j.f.ReadAt(p[pos-off:to-off], pos); err != nil && err != io.EOF {
			return 0, err
		}
		pos = to
	}
	if err := fill(end); err != nil {
		return 0, err
	}
	return len(p), nil
}

// finishStream ends the stream under way: its upload is committed when
// the journal holds the file from 0 to its size without a hole, and the
// journal is then clean; otherwise (or when the upload failed) it is
// aborted, and the caller replays the journal. Caller holds j.mu.
func (j *journal) finishStream() error {
	s := j.st
	j.st = nil
	if j.base != 0 || j.prefix() != j.size || len(j.dirty) != 1 {
		s.abort(true)
		j.counter("stream_aborted")
		return errStreamAborted
	}
	j.changes++
	if err := s.finish(j.size); err != nil {
		j.counter("stream_failed")
		return err
	}
	j.dirty, j.base, j.cut = nil, j.size, -1
	j.counter("stream_committed")
	return nil
}

// whole reports whether the journal holds the file's whole content: the
// remote one is empty (or cut to 0) and one written range covers all.
func (j *journal) whole() bool {
	rb := j.base
	if j.cut >= 0 {
		rb = min(rb, j.cut)
	}
	return rb == 0 && j.size > 0 && len(j.dirty) == 1 && j.dirty[0] == extent{0, j.size}
}

// rewritable reports whether a flush now would send the journal as one
// upload that rewrites the file (whole, no stream begun).
func (j *journal) rewritable() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.whole() && !j.streamed
}

// Changes is how many changing requests Flush has sent so far.
func (j *journal) Changes() int { j.mu.Lock(); defer j.mu.Unlock(); return j.changes }

// A rewriter sends the whole content of a file, body of size bytes, as
// one upload (client.Rewrite); kerr.Busy or kerr.Unsupported: not sent,
// the journal is replayed as updates instead.
type rewriter func(ctx context.Context, body io.Reader, size int64) error

// Flush replays the journal on path through c. A file written whole from
// empty (created here, or cut to 0 first) goes as one upload through
// rw, when not nil: one commit of a new content, where updates in place
// cost an update session on the storage server (a journal prepared,
// applied and finished, each synced).
func (j *journal) Flush(ctx context.Context, c *client.Client, path string, rw rewriter) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.dirtyLocked() {
		return nil
	}
	if j.st != nil {
		if err := j.finishStream(); err == nil {
			return j.f.Truncate(0)
		}
	}
	if rw != nil && j.whole() {
		j.changes++
		err := rw(ctx, io.NewSectionReader(j.f, 0, j.size), j.size)
		switch {
		case err == nil:
			j.base, j.cut, j.dirty = j.size, -1, nil
			return j.f.Truncate(0)
		case !kerr.Is(err, kerr.Busy) && !kerr.Is(err, kerr.Unsupported):
			return err
		}
	}
	if j.cut >= 0 && j.cut < j.base {
		j.changes++
		if err := c.Truncate(ctx, path, j.cut); err != nil {
			return err
		}
		j.base = j.cut
	}
	j.cut = -1
	for len(j.dirty) > 0 {
		d := j.dirty[0]
		j.changes++
		if err := c.PutRange(ctx, path, d.off, io.NewSectionReader(j.f, d.off, d.end-d.off), d.end-d.off); err != nil {
			return err
		}
		j.base = max(j.base, d.end)
		j.dirty = j.dirty[1:]
	}
	if j.size != j.base {
		j.changes++
		if err := c.Truncate(ctx, path, j.size); err != nil {
			return err
		}
		j.base = j.size
	}
	// Flushed: the journal's bytes are on the storage servers; free them.
	return j.f.Truncate(0)
}
