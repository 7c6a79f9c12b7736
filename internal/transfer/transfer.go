// Package transfer is Kaon's one mover: it copies a byte stream from a
// Source to a Destination in 1 MiB pieces with a fixed number of pieces in
// flight (bounded memory, reading overlapped with writing), verifies a
// checksum end to end, reports progress through a callback, stops when its
// context ends or when no byte moved for a while, and names both ends in
// every error.
//
// Ends are small interfaces. Third-party copy uses an HTTP(S) remote, an
// XRootD remote (package transfer/remote) and Kaon files and uploads
// through the storage server (package storage); drain, balance and layout
// conversion plug stripe-level ends into the same two interfaces. This
// package itself knows no protocol (no net/http), so services below the
// front ends may use it.
//
// Checksums: the source may vouch for checksums (recorded at write time,
// a remote's Digest); the mover picks the type to verify (Options.Checksum,
// adler32 by default, or else one the source offers), obtains the value of
// what was moved from the destination when it computes it anyway (a Kaon
// upload) or by hashing in flight otherwise, and refuses to commit on a
// mismatch. A destination that can tell what it stored (a remote asked
// with Want-Digest after the PUT) is checked once more after the commit.
package transfer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// PieceSize is the unit bytes are moved in (the storage server's buffers
// discipline: full 1 MiB pieces).
const PieceSize = 1 << 20

// Source is where bytes come from. String names it in errors and logs and
// must never contain a secret (token, capability).
type Source interface {
	Open(ctx context.Context) (Reader, error)
	String() string
}

// Reader is an open source, read from its beginning to its end.
type Reader interface {
	io.Reader
	io.Closer
	// Size is the number of bytes the source will deliver, -1 if unknown.
	Size() int64
	// Checksums are the values the source vouches for (type → lowercase
	// hex), e.g. recorded when it was written; nil when it offers none.
	Checksums() map[string]string
}

// Destination is where bytes go. String as for Source.
type Destination interface {
	// Create prepares to receive size bytes (-1 if unknown).
	Create(ctx context.Context, size int64) (Writer, error)
	String() string
}

// Writer receives the bytes in order. Nothing is visible at the
// destination before Commit; Abort discards what was written.
type Writer interface {
	io.Writer
	Commit(ctx context.Context) error
	Abort(ctx context.Context)
}

// Hasher is implemented by a Writer that computes checksums of what it
// receives anyway (a Kaon upload): the mover then does not hash again.
type Hasher interface {
	Computes(typ string) bool
	// Sum is the value over every byte written so far.
	Sum(typ string) string
}

// StoredChecker is implemented by a Writer whose far end can tell, after
// Commit, the checksum of what it stored ("" when it does not say).
type StoredChecker interface {
	StoredChecksum(ctx context.Context, typ string) (string, error)
}

// Remover is implemented by a Writer that can delete what it committed
// (used when the stored checksum turns out wrong).
type Remover interface {
	Remove(ctx context.Context) error
}

// Progress is a snapshot of a running copy.
type Progress struct {
	Bytes   int64         // moved so far
	Size    int64         // expected total, -1 if unknown
	Elapsed time.Duration // since the copy started
}

// Options tune a copy; the zero value is usable.
type Options struct {
	// Checksum is the type verified end to end (default adler32). When
	// the source offers other types but not this one, the first of those
	// the mover can compute is verified instead. "none" disables it.
	Checksum string
	// Progress, if set, is called every ProgressInterval while the copy
	// runs (also while no byte moves) and once at the end.
	Progress         func(Progress)
	ProgressInterval time.Duration // default 1 s
	// StallTimeout fails a copy during which no byte moved for this long
	// (default 2 min).
	StallTimeout time.Duration
	// Pieces is the number of PieceSize buffers in flight (default 4).
	Pieces int
	// Rate, when > 0, paces the copy to at most this many bytes per
	// second on average (drain and balance throttle themselves with it).
	// Below MinRate a piece would take longer than a stall check allows;
	// such rates are raised to MinRate.
	Rate int64
}

// MinRate is the lowest Options.Rate honoured (1 MiB/s).
const MinRate = PieceSize

// Result describes a finished copy.
type Result struct {
	Bytes    int64
	Type     string // checksum type verified ("" when none)
	Checksum string // its value (lowercase hex)
	Verified bool   // the source or the destination vouched for the same value
	Elapsed  time.Duration
}

// Error is a failed copy: which end failed (or the comparison), the two
// ends, and the cause. Its Kind is the cause's.
type Error struct {
	Src, Dst string
	Side     string // "source", "destination" or "verify"
	Err      error
}

func (e *Error) Error() string {
	return fmt.Sprintf("copy %s to %s: %s: %v", e.Src, e.Dst, e.Side, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Kind is the cause's kerr kind (I/O when the cause is not a Kaon error).
func (e *Error) Kind() kerr.Kind {
	k := kerr.KindOf(e.Err)
	if k == kerr.Internal {
		return kerr.IO
	}
	return k
}

// KindOf classifies a copy error for a protocol mapping.
func KindOf(err error) kerr.Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind()
	}
	return kerr.KindOf(err)
}

// ErrCut is why a stream that was cut off before its end is not a
// complete one: its reader ended with io.ErrUnexpectedEOF (see Fill).
var ErrCut = errors.New("the stream was cut off before its end (the sender stopped or the connection broke)")

// Fill reads from r until buf is full or r ends: every HTTP body and
// copied stream that becomes data (an upload, a stripe from a peer, what
// the mover copies) is read through it. It returns
// io.EOF only when r ended where its protocol says it ends (r's Read said
// io.EOF), with the bytes read before it. A reader that ended with
// io.ErrUnexpectedEOF was cut off: net/http's request and response bodies
// say so for a chunked body whose connection closed before its last
// (zero-length) chunk and for a Content-Length body short of its length.
// That is never the end of the data, so Fill returns it as an error
// (ErrCut). io.ReadFull cannot be used here: it answers
// io.ErrUnexpectedEOF both for a short last piece and for a cut stream.
func Fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		switch {
		case err == nil:
		case err == io.EOF:
			return n, io.EOF
		case errors.Is(err, io.ErrUnexpectedEOF):
			return n, ErrCut
		default:
			return n, err
		}
	}
	return n, nil
}

var pool = sync.Pool{New: func() any { b := make([]byte, PieceSize); return &b }}

type piece struct {
	buf *[]byte
	n   int
}

// Copy moves everything src delivers to dst.
func Copy(ctx context.Context, src Source, dst Destination, o Options) (Result, error) {
	start := time.Now()
	fail := func(side string, err error) (Result, error) {
		return Result{}, &Error{Src: src.String(), Dst: dst.String(), Side: side, Err: err}
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 2 * time.Minute
	}
	if o.Pieces <= 0 {
		o.Pieces = 4
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	r, err := src.Open(ctx)
	if err != nil {
		return fail("source", err)
	}
	defer r.Close()
	size := r.Size()
	typ, want := pickChecksum(o.Checksum, r.Checksums())
	w, err := dst.Create(ctx, size)
	if err != nil {
		return fail("destination", err)
	}
	committed := false
	defer func() {
		if !committed {
			w.Abort(context.WithoutCancel(ctx))
		}
	}()
	var inflight hash.Hash
	if typ != "" {
		if hs, ok := w.(Hasher); !ok || !hs.Computes(typ) {
			inflight, _ = checksum.New(typ)
		}
	}

	var moved atomic.Int64
	stop := watch(ctx, cancel, &moved, size, start, o)
	pace := newPacer(o.Rate)
	n, side, err := pump(ctx, cancel, r, w, inflight, o.Pieces, &moved, pace)
	stop()
	if err != nil {
		var st *stalled
		if c := context.Cause(ctx); errors.As(c, &st) {
			err = st.err
		}
		return fail(side, err)
	}
	if size >= 0 && n != size {
		return fail("source", kerr.New(kerr.IO, "read", src.String(), fmt.Sprintf("ended after %d of %d bytes", n, size)))
	}
	res := Result{Bytes: n, Type: typ}
	if typ != "" {
		if inflight != nil {
			res.Checksum = hex.EncodeToString(inflight.Sum(nil))
		} else {
			res.Checksum = w.(Hasher).Sum(typ)
		}
		if want != "" {
			if !sameSum(want, res.Checksum) {
				return fail("verify", kerr.New(kerr.IO, "verify", src.String(),
					fmt.Sprintf("%s mismatch: source says %s, %d bytes received have %s", typ, want, n, res.Checksum)))
			}
			res.Verified = true
		}
	}
	if err := w.Commit(ctx); err != nil {
		return fail("destination", err)
	}
	committed = true
	if sc, ok := w.(StoredChecker); ok && typ != "" {
		got, err := sc.StoredChecksum(ctx, typ)
		switch {
		case err != nil:
			return fail("verify", err)
		case got != "" && !sameSum(got, res.Checksum):
			msg := fmt.Sprintf("%s mismatch: %d bytes sent have %s, destination stored %s", typ, n, res.Checksum, got)
			if rm, ok := w.(Remover); ok {
				if rerr := rm.Remove(context.WithoutCancel(ctx)); rerr == nil {
					msg += " (destination file removed)"
				} else {
					msg += " (removing the destination file failed: " + rerr.Error() + ")"
				}
			}
			return fail("verify", kerr.New(kerr.IO, "verify", dst.String(), msg))
		case got != "":
			res.Verified = true
		}
	}
	res.Elapsed = time.Since(start)
	if o.Progress != nil {
		o.Progress(Progress{Bytes: n, Size: size, Elapsed: res.Elapsed})
	}
	return res, nil
}

// pickChecksum chooses the type to verify and the source's value for it.
func pickChecksum(pref string, offered map[string]string) (typ, want string) {
	if pref == "none" {
		return "", ""
	}
	if pref == "" {
		pref = checksum.Adler32
	}
	if v := offered[pref]; v != "" {
		return pref, v
	}
	for _, t := range checksum.SortedTypes(offered) {
		if checksum.Valid(t) && offered[t] != "" {
			return t, offered[t]
		}
	}
	if !checksum.Valid(pref) {
		return "", ""
	}
	return pref, ""
}

// sameSum compares two hex values, tolerating case and dropped leading
// zeros (some servers print adler32 as a number).
func sameSum(a, b string) bool {
	a, b = strings.ToLower(strings.TrimLeft(a, "0")), strings.ToLower(strings.TrimLeft(b, "0"))
	return a == b
}

// pump reads pieces on its own goroutine (hashing them there when the
// destination does not) while this one writes them: reading and writing
// overlap, and at most pieces buffers exist.
func pump(ctx context.Context, cancel context.CancelCauseFunc, r io.Reader, w io.Writer, h hash.Hash, pieces int, moved *atomic.Int64, pace *pacer) (int64, string, error) {
	full := make(chan piece, pieces-1)
	var rerr error
	go func() {
		defer close(full)
		for {
			bp := pool.Get().(*[]byte)
			m, err := Fill(r, *bp)
			if m > 0 {
				if h != nil {
					h.Write((*bp)[:m])
				}
				select {
				case full <- piece{bp, m}:
				case <-ctx.Done():
					pool.Put(bp)
					rerr = context.Cause(ctx)
					return
				}
			} else {
				pool.Put(bp)
			}
			switch err {
			case nil:
				continue
			case io.EOF:
			default:
				rerr = err
			}
			return
		}
	}()
	var n int64
	var werr error
	for p := range full {
		if werr == nil {
			if err := pace.wait(ctx, n+int64(p.n)); err != nil {
				werr = err
				cancel(err)
			} else if _, err := w.Write((*p.buf)[:p.n]); err != nil {
				werr = err
				cancel(err) // stops the reader; keep draining so it can exit
			} else {
				n += int64(p.n)
				moved.Store(n)
			}
		}
		pool.Put(p.buf)
	}
	switch {
	case werr != nil:
		return n, "destination", werr
	case rerr != nil:
		return n, "source", rerr
	case ctx.Err() != nil:
		return n, "source", context.Cause(ctx)
	}
	return n, "", nil
}

// pacer holds a copy to a rate: before a piece is written, it waits
// until the bytes up to its end (total) are due at that rate.
type pacer struct {
	rate  int64
	start time.Time
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

func newPacer(rate int64) *pacer {
	if rate > 0 && rate < MinRate {
		rate = MinRate
	}
	return &pacer{rate: rate, start: time.Now(), now: time.Now, sleep: sleepCtx}
}

func (p *pacer) wait(ctx context.Context, total int64) error {
	if p.rate <= 0 || total == 0 {
		return nil
	}
	due := p.start.Add(time.Duration(float64(total) / float64(p.rate) * float64(time.Second)))
	if d := due.Sub(p.now()); d > 0 {
		return p.sleep(ctx, d)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// stalled is the cancellation cause of a copy that stopped moving.
type stalled struct{ err error }

func (s *stalled) Error() string { return s.err.Error() }

// watch reports progress every interval and cancels the copy when no byte
// moved for StallTimeout. The returned function stops it.
func watch(ctx context.Context, cancel context.CancelCauseFunc, moved *atomic.Int64, size int64, start time.Time, o Options) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(o.ProgressInterval)
		defer t.Stop()
		last, lastMove := int64(-1), time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				b := moved.Load()
				if b != last {
					last, lastMove = b, now
				} else if now.Sub(lastMove) >= o.StallTimeout {
					cancel(&stalled{kerr.New(kerr.IO, "copy", "", fmt.Sprintf("no byte moved for %v (stalled after %d bytes)", o.StallTimeout, b))})
					return
				}
				if o.Progress != nil {
					o.Progress(Progress{Bytes: b, Size: size, Elapsed: now.Sub(start)})
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
