package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/directio"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// stripeWriter receives the bytes of one stripe or replica.
type stripeWriter interface {
	io.Writer
	finish(m StripeMeta) error // make durable, set metadata
	abort()
}

// localStripe writes to a physical file on this server, bypassing the
// page cache where the filesystem allows (package directio).
type localStripe struct {
	f    *directio.File
	fs   *filesystem
	sync bool
}

func (l *localStripe) Write(p []byte) (int, error) { return l.f.Write(p) }

func (l *localStripe) finish(m StripeMeta) error {
	err := l.f.Finish()
	if err == nil {
		err = writeMeta(l.f.OS(), m)
	}
	if err == nil && l.sync {
		err = l.f.Sync()
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (l *localStripe) abort() {
	l.f.Close()
	if os.Remove(l.f.Name()) == nil {
		l.fs.files.Add(-1)
	}
}

// remoteStripe streams one stripe to another storage server with a chunked
// PUT; metadata known only at the end travels as HTTP trailers.
type remoteStripe struct {
	pw   *io.PipeWriter
	req  *http.Request
	done chan error
}

const trailerMeta = "Kaon-Stripe-Meta"

func (s *Server) newRemoteStripe(ctx context.Context, t capability.Target, fid uint64, idx int, token string) *remoteStripe {
	pr, pw := io.Pipe()
	url := fmt.Sprintf("%s/kaon/v1/stripe/%x/%d?cap=%s", t.Addr, fid, idx, token)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, url, pr)
	req.Header.Set("Authorization", "Bearer "+s.cfg.Key.Internal())
	req.ContentLength = -1
	req.Trailer = http.Header{trailerMeta: nil}
	r := &remoteStripe{pw: pw, req: req, done: make(chan error, 1)}
	go func() {
		resp, err := s.http.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				err = fmt.Errorf("stripe %d on %s: HTTP %d %s", idx, t.Addr, resp.StatusCode, body)
			}
		}
		pr.CloseWithError(err)
		r.done <- err
	}()
	return r
}

func (r *remoteStripe) Write(p []byte) (int, error) { return r.pw.Write(p) }

func (r *remoteStripe) finish(m StripeMeta) error {
	r.req.Trailer.Set(trailerMeta, encodeMeta(m))
	r.pw.Close()
	return <-r.done
}

func (r *remoteStripe) abort() {
	r.pw.CloseWithError(errors.New("upload aborted"))
	<-r.done
}

func encodeMeta(m StripeMeta) string {
	return fmt.Sprintf("%d;%d;%s;%s", m.Size, m.Stripe, m.Layout, encodeSums(m.Checksums))
}

func decodeMeta(s string, m *StripeMeta) error {
	parts := strings.SplitN(s, ";", 4)
	if len(parts) != 4 {
		return errors.New("bad stripe metadata trailer")
	}
	size, err1 := strconv.ParseInt(parts[0], 10, 64)
	stripe, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return errors.New("bad stripe metadata trailer")
	}
	m.Size, m.Stripe, m.Layout, m.Checksums = size, stripe, parts[2], decodeSums(parts[3])
	return nil
}

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
	stripes []stripeWriter
	release func() // returns the upload's memory to the budget

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
	local := 0
	for _, t := range c.Targets {
		if s.local(t.FsID) != nil {
			local++
		}
	}
	release, err := s.budget.acquire(ctx, uploadMemory(l, local), wait, "write", c.Path)
	if err != nil {
		return nil, err
	}
	// One capability, one upload: refused once it was used, before any
	// byte of any stripe is touched.
	if err := s.cfg.Namespace.Claim(ctx, c.Fid); err != nil {
		release()
		if ke, ok := err.(*kerr.Error); ok {
			ke.Path = c.Path
		}
		return nil, err
	}
	u := &Upload{s: s, cap: c, token: token, sums: sums, release: release}
	for i, t := range c.Targets {
		var w stripeWriter
		if f := s.local(t.FsID); f != nil {
			// The erasure writer runs one goroutine per stripe already.
			file, err := f.create(c.Fid, l.Kind != layout.EC)
			if err != nil {
				u.abortLocked(ctx)
				return nil, ioError("write", c.Path, err)
			}
			w = &localStripe{f: file, fs: f, sync: s.cfg.SyncData}
		} else {
			w = s.newRemoteStripe(context.WithoutCancel(ctx), t, c.Fid, i, token)
		}
		u.stripes = append(u.stripes, w)
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
	case layout.Replica:
		ws := make([]io.Writer, len(u.stripes))
		for i, w := range u.stripes {
			ws[i] = w
		}
		u.sink, u.closeFn = io.MultiWriter(ws...), func() error { return nil }
	default:
		u.sink, u.closeFn = u.stripes[0], func() error { return nil }
	}
	return u, nil
}

func (u *Upload) abortStripes() {
	for _, w := range u.stripes {
		w.abort()
	}
}

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
		u.failed = kerr.Wrap(kerr.IO, "write", u.cap.Path, err)
		return u.failed
	}
	u.off += int64(len(p))
	return nil
}

// overlapMin is the chunk size from which hashing runs beside the write.
const overlapMin = 64 << 10

// WriteAt accepts writes at any offset at or after the in-order point,
// holding early chunks until the gap before them is filled.
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
		return 0, kerr.New(kerr.Unsupported, "write", u.cap.Path, "rewriting already written bytes is not supported")
	}
	if u.held+len(p) > maxReorder {
		return 0, kerr.New(kerr.Invalid, "write", u.cap.Path, "too many out-of-order bytes pending (sparse writes are not supported)")
	}
	if u.pending == nil {
		u.pending = map[int64][]byte{}
	}
	u.pending[off] = append([]byte(nil), p...)
	u.held += len(p)
	return len(p), nil
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
			u.failed = kerr.Wrap(kerr.IO, "close", u.cap.Path, err)
		}
	}
	if u.failed != nil {
		u.abortLocked(ctx)
		return u.failed
	}
	defer u.release()
	sums := u.sums.Sums()
	var ferr error
	for i, w := range u.stripes {
		m := StripeMeta{Fid: u.cap.Fid, Stripe: i, Layout: u.cap.Layout, Size: u.off, Checksums: sums, Path: u.cap.Path}
		if err := w.finish(m); err != nil && ferr == nil {
			ferr = kerr.Wrap(kerr.IO, "close", u.cap.Path, err)
		}
	}
	if ferr == nil {
		ferr = u.s.cfg.Namespace.Commit(ctx, cluster.Commit{Fid: u.cap.Fid, Size: u.off, Checksums: sums})
	}
	if ferr != nil {
		u.failed = ferr
		_ = u.s.cfg.Namespace.Abort(context.WithoutCancel(ctx), u.cap.Fid)
		return ferr
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
	// Close the stripes first so an encoder blocked on a stalled remote
	// stripe is released, then stop the encoder.
	u.abortStripes()
	if u.stopFn != nil {
		u.stopFn()
	}
	u.release()
	_ = u.s.cfg.Namespace.Abort(context.WithoutCancel(ctx), u.cap.Fid)
}

// ioError keeps a Kaon error as it is and classifies any other as I/O.
func ioError(op, path string, err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke
	}
	return kerr.Wrap(kerr.IO, op, path, err)
}
