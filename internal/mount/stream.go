package mount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
)

// A file written sequentially from its start is streamed to the storage
// server as it is written: once the journal holds streamMin bytes from
// offset 0 of a file that is empty on the servers, an upload that
// rewrites the file (the node's rewriter: client.Rewrite, a chunked PUT)
// starts and is fed from the journal as writes arrive; the flush
// (fsync, close) ends it, and the storage server commits it (checksums
// computed as it streamed). The file then has its new content at a new
// file id, its mode, owner and extended attributes kept, which the node
// adopts (rebind). The journal still receives every write, so anything the
// stream cannot carry — a write below what was already sent, a
// truncation, a change made elsewhere, a hole at the flush, an upload
// that failed (a storage server restarting) — aborts the upload, which
// then leaves nothing (an upload is visible only once committed), and
// the flush replays the journal as ranged PUTs as it does for any other
// file, within the mount's grace. So the stream never makes a file
// shorter than what a flush acknowledged, and a flush it cannot finish
// falls back to the path that keeps the journal.
//
// Measured (docs/DESIGN-NOTES.md, issue 23): the journal-then-copy path
// costs the whole file twice in series at close; the stream overlaps the
// copy with the writes and writes each byte once on the backend.
const streamMin = 4 << 20

// stream is one upload fed from a journal's file. Lock order: the
// journal's mu, then the stream's.
type stream struct {
	f    *os.File // the journal's file
	path string

	mu    sync.Mutex
	cond  sync.Cond
	sent  int64 // bytes taken for the upload (being read from f or sent)
	avail int64 // the journal holds bytes [0, avail) written
	end   int64 // the flush's size, once finishing (-1 before)
	err   error // aborted: the upload's body fails with it

	cancel context.CancelFunc // ends the upload's request (an abort)
	done   chan struct{}
	result error // the upload's outcome, once done is closed
}

// errStreamAborted ends an upload's body that the journal can no longer
// carry: the storage server sees a body that did not end cleanly and
// aborts the upload.
var errStreamAborted = errors.New("kaon mount: streamed upload abandoned (the file was not written sequentially); the journal is replayed instead")

// startStream starts uploading the file at path through rw from f,
// whose bytes [0, avail) are written.
func startStream(rw rewriter, f *os.File, path string, avail int64) *stream {
	s := &stream{f: f, path: path, avail: avail, end: -1, done: make(chan struct{})}
	s.cond.L = &s.mu
	// Not the caller's context: the upload outlives the write that
	// started it. The flush that ends it waits for its answer; an abort
	// ends its body and its request (a body blocked on a server that
	// stopped reading too).
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		defer cancel()
		s.result = rw(ctx, s, -1)
	}()
	return s
}

// Read is the upload's body: the journal's bytes in order as they are
// written, io.EOF after the flush's size.
func (s *stream) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.err == nil && s.sent >= s.avail && (s.end < 0 || s.sent < s.end) {
		s.cond.Wait()
	}
	if s.err != nil {
		return 0, s.err
	}
	if s.end >= 0 && s.sent >= s.end {
		return 0, io.EOF
	}
	limit := s.avail
	if s.end >= 0 {
		limit = min(limit, s.end)
	}
	off := s.sent
	n := int(min(int64(len(p)), limit-off))
	// Taken before it is read: a write below s.sent aborts the stream,
	// so bytes changed while they are read are never committed.
	s.sent = off + int64(n)
	s.mu.Unlock()
	m, err := s.f.ReadAt(p[:n], off)
	s.mu.Lock()
	if s.err != nil {
		return 0, s.err
	}
	if m < n {
		s.err = fmt.Errorf("kaon mount: %s: reading the journal at %d for the streamed upload: %v", s.path, off, err)
		return 0, s.err
	}
	return n, nil
}

// wrote tells the stream that bytes [off, end) were written to the
// journal, which now holds [0, avail) without a hole. It reports false
// (and aborts) when the write changed bytes already sent.
func (s *stream) wrote(off, avail int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off < s.sent {
		s.abortLocked()
		return false
	}
	s.avail = avail
	s.cond.Broadcast()
	return true
}

// abort ends the upload without a commit, and waits for its end when
// wait is set (before the journal is replayed over the same file).
func (s *stream) abort(wait bool) {
	s.mu.Lock()
	s.abortLocked()
	s.mu.Unlock()
	if wait {
		<-s.done
	}
}

func (s *stream) abortLocked() {
	if s.err == nil && s.end < 0 {
		s.err = errStreamAborted
		s.cond.Broadcast()
		s.cancel()
	}
}

// finish ends the body at size bytes (all of them written to the
// journal, from 0 without a hole) and waits for the storage server's
// answer: nil once the file is committed with them.
func (s *stream) finish(size int64) error {
	s.mu.Lock()
	if s.err == nil {
		s.end = size
		s.avail = max(s.avail, size)
		s.cond.Broadcast()
	}
	s.mu.Unlock()
	<-s.done
	if s.result != nil && !errors.Is(s.result, errStreamAborted) {
		log.Printf("kaon mount: %s: streamed upload failed, replaying the journal: %v", s.path, s.result)
	}
	return s.result
}

// streamable reports whether a journal opened now for n may stream n's
// content as an upload that rewrites it: n is empty on the servers (the
// rewrite keeps its mode, owner and extended attributes). n.mu held.
func (n *node) streamable() bool { return !n.attr.IsDir && n.attr.Size == 0 }
