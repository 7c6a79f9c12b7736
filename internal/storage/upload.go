package storage

import (
	"context"
	"fmt"
	"github.com/kaon-storage/kaon/internal/bufmem"
	"io"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// maxReorder bounds the bytes an Upload holds for out-of-order writes
// (parallel xrootd streams); beyond it the client gets a clear error.
const maxReorder = 256 << 20

// Upload is one file being written through this server as its entry. Bytes
// are hashed and encoded as they stream; nothing is held whole.
type Upload struct {
	s       *Server
	cap     *capability.Capability
	token   string
	sums    *checksum.Multi
	sink    io.Writer // layout encoder feeding the stripes
	closeFn func() error
	stopFn  func() // stops the encoder without flushing (abort)
	stripes []backend.Writer
	onPeer  []bool // stripe i is written on another storage server
	release func() // returns the upload's memory to the budget
	// staged: a conversion's copy, neither claimed nor committed here
	// (the namespace switches it in); Commit only finishes the stripes.
	staged bool
	// crcOf, when set, gives the crc32c the sums leave out, from what the
	// erasure writer's data frames or the first stripe's block sums hold.
	crcOf func() uint32

	mu      sync.Mutex
	off     int64            // bytes accepted in order
	pending map[int64][]byte // out-of-order chunks by offset
	held    int
	failed  error
	closed  bool
}

// NewUpload verifies the capability and opens every stripe target. It
// waits up to wait for the memory the upload's buffers need (a Busy error
// after that).
func (s *Server) NewUpload(ctx context.Context, c *capability.Capability, token string, wait time.Duration) (*Upload, error) {
	if c.Staged {
		return nil, kerr.New(kerr.Permission, "write", c.Path, "capability is for a conversion, not an upload")
	}
	return s.newUpload(ctx, c, token, wait)
}

func (s *Server) newUpload(ctx context.Context, c *capability.Capability, token string, wait time.Duration) (*Upload, error) {
	if !c.Write {
		return nil, kerr.New(kerr.Permission, "write", c.Path, "capability does not allow writing")
	}
	l, err := layout.Parse(c.Layout)
	if err != nil {
		return nil, err
	}
	if len(c.Targets) != l.Stripes() {
		return nil, kerr.New(kerr.Invalid, "write", c.Path, "capability targets do not match the layout")
	}
	sums, err := checksum.NewMulti(c.Checksums...)
	if err != nil {
		return nil, kerr.Wrap(kerr.Invalid, "write", c.Path, err)
	}
	var stores []backend.Store
	for _, t := range c.Targets {
		if f := s.local(t.FsID); f != nil {
			stores = append(stores, f.store)
		}
	}
	release, opts, err := s.admitUpload(ctx, l, stores, wait, c.Path)
	if err != nil {
		return nil, err
	}
	// In flight (InFlight) from admission to the end of the upload.
	s.act.uploads.Add(1)
	admitted := release
	release = func() { admitted(); s.act.uploads.Add(-1) }
	// One capability, one upload: refused once it was used, before any
	// byte of any stripe is touched.
	if !c.Staged {
		if err := s.cfg.Namespace.Claim(ctx, c.Fid); err != nil {
			release()
			if ke, ok := err.(*kerr.Error); ok {
				ke.Path = c.Path
			}
			return nil, err
		}
		// Reported in heartbeats until the upload ends (release).
		s.writing.add(c.Fid)
		fid, free, client := c.Fid, release, s.bg.client()
		release = func() { free(); s.writing.remove(fid); client() }
	}
	u := &Upload{s: s, cap: c, token: token, sums: sums, release: release, staged: c.Staged}
	for i, t := range c.Targets {
		var w backend.Writer
		f := s.local(t.FsID)
		if f != nil {
			w, err = f.create(c.Fid, opts)
		} else if p, perr := s.peers("write", c.Path); perr != nil {
			err = perr
		} else {
			w, err = p.CreateStripe(context.WithoutCancel(ctx), t.Addr, c.Fid, i, token)
		}
		if err != nil {
			u.abortLocked(ctx)
			return nil, stripeError("write", c.Path, err)
		}
		u.stripes = append(u.stripes, w)
		u.onPeer = append(u.onPeer, f == nil)
	}
	switch l.Kind {
	case layout.EC:
		ws := make([]io.Writer, len(u.stripes))
		for i, w := range u.stripes {
			ws[i] = w
		}
		ew, err := erasure.NewWriter(ecLayout(l), ws)
		if err != nil {
			u.abortLocked(ctx)
			return nil, kerr.Wrap(kerr.Invalid, "write", c.Path, err)
		}
		ew.SetName(c.Path)
		u.sink, u.closeFn, u.stopFn = ew, ew.Close, ew.Abort
		u.crcOf = ew.DataCRC32C
	case layout.Replica:
		ws := make([]io.Writer, len(u.stripes))
		for i, w := range u.stripes {
			ws[i] = w
		}
		u.sink, u.closeFn = io.MultiWriter(ws...), func() error { return nil }
	default:
		u.sink, u.closeFn = u.stripes[0], func() error { return nil }
	}
	if l.Kind != layout.EC {
		// The first stripe sees every byte; a local one sums its blocks.
		if cw, ok := u.stripes[0].(backend.CRC32CWriter); ok {
			if _, ok := cw.DataCRC32C(); ok {
				u.crcOf = func() uint32 { crc, _ := cw.DataCRC32C(); return crc }
			}
		}
	}
	u.foldCRC32C()
	return u, nil
}

// foldCRC32C leaves crc32c out of the sums when the stripes' writer
// gives it (crcOf) and other types are hashed anyway: one pass over the
// bytes instead of two, and the value is that of the bytes stored.
func (u *Upload) foldCRC32C() {
	types := u.sums.Types()
	if u.crcOf == nil || len(types) < 2 || !slices.Contains(types, checksum.CRC32C) {
		u.crcOf = nil
		return
	}
	types = slices.DeleteFunc(types, func(t string) bool { return t == checksum.CRC32C })
	sums, err := checksum.NewMulti(types...)
	if err != nil { // types came from a Multi: cannot happen
		u.crcOf = nil
		return
	}
	u.sums = sums
}

func (u *Upload) abortStripes() {
	for _, w := range u.stripes {
		w.Abort()
	}
}

// ReadFrom appends everything r delivers, in full 1 MiB pieces.
func (u *Upload) ReadFrom(r io.Reader) (int64, error) { return copyFull(u, r) }

// Write appends p in order.
func (u *Upload) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.writeLocked(p); err != nil {
		return 0, err
	}
	u.drainLocked()
	return len(p), u.failed
}

func (u *Upload) writeLocked(p []byte) error {
	if u.failed != nil {
		return u.failed
	}
	// Hash while the layout writer stores the same bytes: a single stream
	// then uses two cores instead of doing one after the other.
	var hashed chan struct{}
	if len(p) >= overlapMin {
		hashed = make(chan struct{})
		go func() { u.sums.Write(p); close(hashed) }()
	} else {
		u.sums.Write(p)
	}
	_, err := u.sink.Write(p)
	if hashed != nil {
		<-hashed // p belongs to the caller once we return
	}
	if err != nil {
		u.failed = stripeError("write", u.cap.Path, err)
		return u.failed
	}
	u.off += int64(len(p))
	return nil
}

// overlapMin is the chunk size from which hashing runs beside the write.
const overlapMin = 64 << 10

// WriteAt accepts writes at any offset at or after the in-order point,
// holding early chunks until the gap before them is filled. A write it
// refuses fails the upload: the file would not be what its writer wrote,
// so the close that follows must not commit it.
func (u *Upload) WriteAt(p []byte, off int64) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.failed != nil:
		return 0, u.failed
	case off == u.off:
		if err := u.writeLocked(p); err != nil {
			return 0, err
		}
		u.drainLocked()
		return len(p), u.failed
	case off < u.off:
		return 0, u.refuseLocked(kerr.New(kerr.Unsupported, "write", u.cap.Path,
			fmt.Sprintf("rewriting already written bytes (offset %d, %d bytes written) is not supported; the upload is void", off, u.off)))
	}
	if u.held+len(p) > maxReorder {
		return 0, u.refuseLocked(kerr.New(kerr.Invalid, "write", u.cap.Path, "too many out-of-order bytes pending (sparse writes are not supported); the upload is void"))
	}
	if u.pending == nil {
		u.pending = map[int64][]byte{}
	}
	u.pending[off] = append([]byte(nil), p...)
	u.held += len(p)
	return len(p), nil
}

// Truncate accepts a truncate to the size written so far (a no-op) and
// refuses, failing the upload as WriteAt does, any other size: uploads
// are written sequentially.
func (u *Upload) Truncate(size int64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.failed != nil:
		return u.failed
	case size == u.off && len(u.pending) == 0:
		return nil
	}
	return u.refuseLocked(kerr.New(kerr.Unsupported, "truncate", u.cap.Path,
		fmt.Sprintf("uploads are written sequentially (truncate to %d after %d bytes); the upload is void", size, u.off)))
}

// refuseLocked fails the upload with err (its first failure stays).
func (u *Upload) refuseLocked(err error) error {
	if u.failed == nil {
		u.failed = err
	}
	return u.failed
}

func (u *Upload) drainLocked() {
	for u.failed == nil {
		p, ok := u.pending[u.off]
		if !ok {
			return
		}
		delete(u.pending, u.off)
		u.held -= len(p)
		_ = u.writeLocked(p)
	}
}

// Size is the number of bytes accepted in order so far.
func (u *Upload) Size() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.off
}

// Sums are the checksums of the bytes accepted in order so far (the types
// the capability asked for), e.g. to verify a copy before committing it.
func (u *Upload) Sums() map[string]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sumsLocked()
}

func (u *Upload) sumsLocked() map[string]string {
	sums := u.sums.Sums()
	if u.crcOf != nil && u.failed == nil { // a failed write may still run
		sums[checksum.CRC32C] = fmt.Sprintf("%08x", u.crcOf())
	}
	return sums
}

// Computes reports whether the upload computes checksum type typ.
func (u *Upload) Computes(typ string) bool {
	for _, t := range u.cap.Checksums {
		if t == typ {
			return true
		}
	}
	return false
}

// Commit finishes every stripe and makes the file visible in the namespace.
// On any failure nothing becomes visible and the stripes are removed.
func (u *Upload) Commit(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return u.failed
	}
	u.closed = true
	if u.failed == nil && len(u.pending) > 0 {
		offs := make([]int64, 0, len(u.pending))
		for o := range u.pending {
			offs = append(offs, o)
		}
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		u.failed = kerr.New(kerr.Invalid, "close", u.cap.Path, fmt.Sprintf("hole in written data at offset %d (next chunk at %d)", u.off, offs[0]))
	}
	if u.failed == nil {
		if err := u.closeFn(); err != nil {
			u.failed = stripeError("close", u.cap.Path, err)
		}
	}
	if u.failed != nil {
		u.abortLocked(ctx)
		return u.failed
	}
	defer u.release()
	sums := u.sumsLocked()
	var ferr error
	for i, w := range u.stripes {
		m := backend.Meta{Fid: u.cap.Fid, Stripe: i, Layout: u.cap.Layout, Size: u.off, Checksums: sums, Path: u.cap.Path}
		if err := w.Finish(m); err != nil && ferr == nil {
			ferr = stripeError("close", u.cap.Path, err)
		}
	}
	if ferr == nil && !u.staged {
		ferr = u.s.cfg.Namespace.Commit(ctx, message.Commit{Fid: u.cap.Fid, Size: u.off, Checksums: sums})
		if ke, ok := ferr.(*kerr.Error); ok {
			ke.Path = u.cap.Path // the namespace knows the upload by its fid
		}
	}
	if ferr != nil {
		u.failed = ferr
		if u.staged {
			u.abortStripes() // finished ones are queued for deletion by the namespace
		} else {
			_ = u.s.cfg.Namespace.Abort(context.WithoutCancel(ctx), u.cap.Fid)
		}
		return ferr
	}
	if !u.staged {
		acc := u.s.acct.of(u.cap)
		acc.writeBytes.Add(u.off)
		acc.writes.Add(1)
	}
	return nil
}

// Abort discards the upload: stripes removed, nothing visible.
func (u *Upload) Abort(ctx context.Context) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	u.closed = true
	if u.failed == nil {
		u.failed = kerr.New(kerr.IO, "write", u.cap.Path, "upload aborted")
	}
	u.abortLocked(ctx)
}

func (u *Upload) abortLocked(ctx context.Context) {
	// The stripes on peers first: each is a pipe into a request, which
	// may be aborted while the encoder writes to it, and that releases an
	// encoder blocked on a stalled peer. Then stop the encoder, and only
	// then abort the local stripes: a local stripe writer must not be
	// closed under a write (its buffers go back to a pool).
	for i, w := range u.stripes {
		if u.onPeer[i] {
			w.Abort()
		}
	}
	if u.stopFn != nil {
		u.stopFn()
	}
	u.abortStripes() // a no-op for those aborted above
	u.release()
	if !u.staged {
		_ = u.s.cfg.Namespace.Abort(context.WithoutCancel(ctx), u.cap.Fid)
	}
}

// stripeError names the file a stripe error is about, keeping the kind
// (an error that is not a Kaon one is an I/O error).
func stripeError(op, path string, err error) error {
	k := kerr.KindOf(err)
	if k == kerr.Internal {
		k = kerr.IO
	}
	return kerr.Wrap(k, op, path, err)
}

// copyBufs recycles copyFull's buffers (counted in uploadMemory).
var copyBufs = bufmem.Sized(copyBufSize)

// copyFull copies r to w in full 1 MiB chunks: network reads return
// whatever TCP delivered, and hashing and writing in large pieces costs far
// fewer syscalls and function calls per byte. Only r's clean end (io.EOF)
// ends the copy without an error (transfer.Fill).
func copyFull(w io.Writer, r io.Reader) (int64, error) {
	buf := copyBufs.Get()
	defer copyBufs.Put(buf)
	var n int64
	for {
		m, err := transfer.Fill(r, buf)
		if m > 0 {
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
		}
		switch err {
		case nil:
		case io.EOF:
			return n, nil
		default:
			return n, err // a body cut off before its end is an error, never the end
		}
	}
}
