package transfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// memSource serves data, vouching for sums; cut ends the stream early.
type memSource struct {
	data []byte
	sums map[string]string
	size int64 // announced; -1 unknown
	cut  int   // deliver only this many bytes when > 0
	r    io.Reader
	err  error // Open fails with it
}

func (s *memSource) String() string { return "mem:src" }
func (s *memSource) Open(context.Context) (Reader, error) {
	if s.err != nil {
		return nil, s.err
	}
	d := s.data
	if s.cut > 0 {
		d = d[:s.cut]
	}
	s.r = bytes.NewReader(d)
	return s, nil
}
func (s *memSource) Read(p []byte) (int, error)   { return s.r.Read(p) }
func (s *memSource) Close() error                 { return nil }
func (s *memSource) Size() int64                  { return s.size }
func (s *memSource) Checksums() map[string]string { return s.sums }

type memDest struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	committed bool
	aborted   bool
	removed   bool
	stored    string // StoredChecksum answer ("" = compute from buf)
	failAt    int    // Write fails once this many bytes were written (>0)
	hashes    bool   // implements Hasher (through memHasher)
	gotSize   int64
}

func (d *memDest) String() string { return "mem:dst" }
func (d *memDest) Create(_ context.Context, size int64) (Writer, error) {
	d.gotSize = size
	if d.hashes {
		return memHasher{d}, nil
	}
	return d, nil
}
func (d *memDest) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failAt > 0 && d.buf.Len()+len(p) > d.failAt {
		return 0, kerr.New(kerr.NoSpace, "write", "mem:dst", "disk full")
	}
	return d.buf.Write(p)
}
func (d *memDest) Commit(context.Context) error { d.committed = true; return nil }
func (d *memDest) Abort(context.Context)        { d.aborted = true }

// storedDest also answers StoredChecksum and Remove.
type storedDest struct{ *memDest }

func (d storedDest) Create(ctx context.Context, size int64) (Writer, error) {
	d.memDest.gotSize = size
	return d, nil
}
func (d storedDest) StoredChecksum(_ context.Context, typ string) (string, error) {
	if d.stored != "" {
		return d.stored, nil
	}
	return checksum.Sum(typ, d.buf.Bytes())
}
func (d storedDest) Remove(context.Context) error { d.removed = true; return nil }

type memHasher struct{ *memDest }

func (h memHasher) Computes(typ string) bool { return typ == checksum.Adler32 }
func (h memHasher) Sum(typ string) string {
	v, _ := checksum.Sum(typ, h.buf.Bytes())
	return v
}

func payload(n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(n))).Read(b)
	return b
}

func TestCopyVerifiesAgainstSource(t *testing.T) {
	data := payload(3*PieceSize + 12345)
	sum, _ := checksum.Sum("adler32", data)
	for _, hashes := range []bool{false, true} {
		d := &memDest{hashes: hashes}
		var calls int
		res, err := Copy(context.Background(), &memSource{data: data, size: int64(len(data)), sums: map[string]string{"adler32": sum}}, d,
			Options{Progress: func(Progress) { calls++ }})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(d.buf.Bytes(), data) || !d.committed || d.aborted {
			t.Fatalf("hashes=%v: bytes equal %v committed %v aborted %v", hashes, bytes.Equal(d.buf.Bytes(), data), d.committed, d.aborted)
		}
		if res.Bytes != int64(len(data)) || res.Type != "adler32" || res.Checksum != sum || !res.Verified {
			t.Fatalf("result %+v, want adler32 %s verified", res, sum)
		}
		if d.gotSize != int64(len(data)) {
			t.Fatalf("destination told size %d", d.gotSize)
		}
		if calls == 0 {
			t.Fatal("progress never reported")
		}
	}
}

func TestCopyRefusesChecksumMismatch(t *testing.T) {
	data := payload(PieceSize + 7)
	d := &memDest{}
	_, err := Copy(context.Background(), &memSource{data: data, size: -1, sums: map[string]string{"adler32": "00000001"}}, d, Options{})
	var te *Error
	if !errors.As(err, &te) || te.Side != "verify" || KindOf(err) != kerr.IO {
		t.Fatalf("err = %v, want a verify error", err)
	}
	if d.committed || !d.aborted {
		t.Fatalf("mismatching copy committed=%v aborted=%v", d.committed, d.aborted)
	}
	if !strings.Contains(err.Error(), "mem:src") || !strings.Contains(err.Error(), "mem:dst") || !strings.Contains(err.Error(), "00000001") {
		t.Fatalf("error does not name both ends and the values: %v", err)
	}
}

func TestCopyUsesTypeSourceOffers(t *testing.T) {
	data := payload(1000)
	md5, _ := checksum.Sum("md5", data)
	res, err := Copy(context.Background(), &memSource{data: data, size: 1000, sums: map[string]string{"md5": md5}}, &memDest{}, Options{})
	if err != nil || res.Type != "md5" || !res.Verified {
		t.Fatalf("res %+v err %v, want md5 verified", res, err)
	}
}

func TestCopyShortSource(t *testing.T) {
	data := payload(2 * PieceSize)
	d := &memDest{}
	_, err := Copy(context.Background(), &memSource{data: data, size: int64(len(data)), cut: PieceSize + 1}, d, Options{})
	var te *Error
	if !errors.As(err, &te) || te.Side != "source" || !strings.Contains(err.Error(), "ended after") {
		t.Fatalf("err = %v", err)
	}
	if d.committed || !d.aborted {
		t.Fatal("short copy was committed")
	}
}

func TestCopyDestinationFailure(t *testing.T) {
	data := payload(8 * PieceSize)
	d := &memDest{failAt: 2 * PieceSize}
	_, err := Copy(context.Background(), &memSource{data: data, size: -1}, d, Options{})
	var te *Error
	if !errors.As(err, &te) || te.Side != "destination" || KindOf(err) != kerr.NoSpace {
		t.Fatalf("err = %v (kind %v)", err, KindOf(err))
	}
	if d.committed || !d.aborted {
		t.Fatal("failed copy was committed")
	}
}

func TestCopySourceOpenFailure(t *testing.T) {
	d := &memDest{}
	_, err := Copy(context.Background(), &memSource{err: kerr.New(kerr.NotFound, "open", "mem:src", "no such file")}, d, Options{})
	if KindOf(err) != kerr.NotFound || !strings.Contains(err.Error(), "source") {
		t.Fatalf("err = %v", err)
	}
}

func TestCopyStoredChecksumMismatchRemoves(t *testing.T) {
	data := payload(5000)
	d := storedDest{&memDest{stored: "deadbeef"}}
	_, err := Copy(context.Background(), &memSource{data: data, size: 5000}, d, Options{})
	if err == nil || !d.removed || !strings.Contains(err.Error(), "destination file removed") {
		t.Fatalf("err = %v removed = %v", err, d.removed)
	}
	d2 := storedDest{&memDest{}}
	res, err := Copy(context.Background(), &memSource{data: data, size: 5000}, d2, Options{})
	if err != nil || !res.Verified || d2.removed {
		t.Fatalf("res %+v err %v", res, err)
	}
}

// blockingSource delivers one piece, then blocks until its context ends.
type blockingSource struct{ ctx context.Context }

func (s *blockingSource) String() string { return "block:src" }
func (s *blockingSource) Open(ctx context.Context) (Reader, error) {
	s.ctx = ctx
	return &blockingReader{ctx: ctx, left: 100}, nil
}

type blockingReader struct {
	ctx  context.Context
	left int
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if r.left > 0 {
		n := min(len(p), r.left)
		r.left -= n
		return n, nil
	}
	<-r.ctx.Done()
	return 0, context.Cause(r.ctx)
}
func (r *blockingReader) Close() error                 { return nil }
func (r *blockingReader) Size() int64                  { return -1 }
func (r *blockingReader) Checksums() map[string]string { return nil }

func TestCopyStallTimeout(t *testing.T) {
	d := &memDest{}
	done := make(chan error, 1)
	go func() {
		_, err := Copy(context.Background(), &blockingSource{}, d, Options{StallTimeout: 200 * time.Millisecond, ProgressInterval: 50 * time.Millisecond})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no byte moved") {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stalled copy was not stopped within 30 s")
	}
	if d.committed || !d.aborted {
		t.Fatal("stalled copy was committed")
	}
}

func TestCopyCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	d := &memDest{}
	done := make(chan error, 1)
	go func() {
		_, err := Copy(ctx, &blockingSource{}, d, Options{})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cancelled copy did not return within 30 s")
	}
	if d.committed {
		t.Fatal("cancelled copy was committed")
	}
}

// TestPacer: a paced copy waits until the bytes up to the end of each
// piece are due at the rate (a fake clock: the waits asked for are what
// is checked).
func TestPacer(t *testing.T) {
	now := time.Unix(1000, 0)
	var slept []time.Duration
	p := &pacer{rate: 4 << 20, start: now, now: func() time.Time { return now },
		sleep: func(_ context.Context, d time.Duration) error { slept = append(slept, d); now = now.Add(d); return nil }}
	for total := int64(0); total <= 8<<20; total += 1 << 20 {
		if err := p.wait(context.Background(), total); err != nil {
			t.Fatal(err)
		}
	}
	// 8 MiB at 4 MiB/s: the piece ending at 8 MiB is written at 2 s, not before.
	if got := now.Sub(time.Unix(1000, 0)); got != 2*time.Second {
		t.Fatalf("paced 8 MiB at 4 MiB/s over %v, want 2s (waits %v)", got, slept)
	}
	if len(slept) != 8 {
		t.Fatalf("%d waits, want one before each of the 8 pieces: %v", len(slept), slept)
	}
	// Time spent elsewhere (a slow destination) counts: no wait when behind.
	now = now.Add(time.Hour)
	slept = nil
	if err := p.wait(context.Background(), 9<<20); err != nil || len(slept) != 0 {
		t.Fatalf("a copy behind its rate waited %v (%v)", slept, err)
	}
	if newPacer(1).rate != MinRate || newPacer(0).wait(context.Background(), 1<<30) != nil {
		t.Fatal("rates below MinRate are raised to it; rate 0 never waits")
	}
	// Cancellation ends a wait.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q := newPacer(MinRate)
	if err := q.wait(ctx, 1<<30); err == nil {
		t.Fatal("a cancelled copy kept waiting")
	}
}

// TestCopyRate: Options.Rate paces a real copy (the bytes arrive whole
// and verified; the pacing itself is TestPacer's).
func TestCopyRate(t *testing.T) {
	data := make([]byte, 3<<20+17)
	rand.New(rand.NewSource(3)).Read(data)
	sum, _ := checksum.Sum("adler32", data)
	src := &memSource{data: data, size: int64(len(data)), sums: map[string]string{"adler32": sum}}
	dst := &memDest{}
	res, err := Copy(context.Background(), src, dst, Options{Rate: 64 << 20})
	if err != nil || !res.Verified || !bytes.Equal(dst.buf.Bytes(), data) {
		t.Fatalf("paced copy: %v verified=%v equal=%v", err, res.Verified, bytes.Equal(dst.buf.Bytes(), data))
	}
}

// cutReader delivers data, then fails as net/http's bodies do when their
// connection closes before the body's end.
type cutReader struct{ r io.Reader }

func (c cutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func TestFillTellsACleanEndFromACut(t *testing.T) {
	data := payload(1000)
	buf := make([]byte, 600)
	r := bytes.NewReader(data)
	if n, err := Fill(r, buf); n != 600 || err != nil {
		t.Fatalf("full piece: %d %v", n, err)
	}
	if n, err := Fill(r, buf); n != 400 || err != io.EOF {
		t.Fatalf("short last piece of a stream that ended: %d %v, want 400 io.EOF", n, err)
	}
	n, err := Fill(cutReader{bytes.NewReader(data)}, make([]byte, 2000))
	if n != 1000 || !errors.Is(err, ErrCut) {
		t.Fatalf("cut stream: %d %v, want 1000 bytes and ErrCut", n, err)
	}
}

// A source of unknown size (a chunked HTTP body) cut off before its end
// is a failed copy, never a short one.
func TestCopyCutSourceOfUnknownSize(t *testing.T) {
	data := payload(PieceSize + 300000)
	d := &memDest{}
	src := &memSource{data: data, size: -1}
	_, err := Copy(context.Background(), cutSource{src}, d, Options{})
	var te *Error
	if !errors.As(err, &te) || te.Side != "source" || !errors.Is(err, ErrCut) {
		t.Fatalf("err = %v, want a source error saying the stream was cut", err)
	}
	if d.committed || !d.aborted {
		t.Fatalf("cut copy committed=%v aborted=%v", d.committed, d.aborted)
	}
}

type cutSource struct{ *memSource }

func (s cutSource) Open(ctx context.Context) (Reader, error) {
	if _, err := s.memSource.Open(ctx); err != nil {
		return nil, err
	}
	s.memSource.r = cutReader{s.memSource.r}
	return s.memSource, nil
}
