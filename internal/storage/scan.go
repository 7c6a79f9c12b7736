package storage

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/layout"
)

// scanOptions tune one scan of a filesystem.
type scanOptions struct {
	Rate      int   // stripes per second (<= 0: unthrottled)
	Scrub     bool  // re-read every stripe's bytes
	ScrubRate int64 // bytes per second read by the scrub (<= 0: unthrottled)
	Batch     int   // stripes per report (default 500)
	// Skip leaves fids out of the scan (the storage server's latency
	// probe writes a stripe of its own).
	Skip func(fid uint64) bool
	// AddSums lets a scrub give block sums to replicas written before
	// stores kept them, once their bytes matched their checksum; Added
	// counts them.
	AddSums bool
	Added   int64
	// Bad, when set, counts the blocks (erasure-coded stripes: frames)
	// found failing their crc32c.
	Bad *atomic.Int64
}

func (o *scanOptions) foundBad(n int) {
	if o.Bad != nil && n > 0 {
		o.Bad.Add(int64(n))
	}
}

// walkStore walks st and reports every stripe it holds, with its metadata and
// length (and, scrubbing, whether its bytes match its checksums or frame
// crcs), to emit in batches of o.Batch, with the number of stripes walked
// and bytes read so far. It stops at the first error of emit or when ctx
// ends. The last batch (possibly empty) is emitted before it returns nil.
func walkStore(ctx context.Context, st backend.Store, o *scanOptions, emit func(batch []message.FsckStripe, seen, read int64) error) error {
	if o.Batch <= 0 {
		o.Batch = 500
	}
	start := time.Now()
	var seen, read int64
	batch := make([]message.FsckStripe, 0, o.Batch)
	scrubPace := &pace{rate: float64(o.ScrubRate), start: start}
	err := st.Walk(func(fid uint64, m backend.Meta, merr error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if o.Skip != nil && o.Skip(fid) {
			return nil
		}
		seen++
		if o.Rate > 0 {
			(&pace{rate: float64(o.Rate), start: start}).wait(ctx, float64(seen))
		}
		s := message.FsckStripe{Fid: fid, DiskSize: -1}
		if merr != nil {
			s.MetaErr = reason(merr)
		} else {
			s.Stripe, s.Layout, s.Size, s.Checksums, s.Path, s.Version = m.Stripe, m.Layout, m.Size, m.Checksums, m.Path, m.Version
		}
		r, err := st.Open(fid)
		switch {
		case err != nil:
			s.DiskErr = reason(err)
		default:
			s.DiskSize = r.Size()
			if o.Scrub && merr == nil {
				s.Scrubbed = true
				sc := scrubber{ctx: ctx, st: st, r: r, m: m, s: &s, p: scrubPace, done: read, o: o}
				n, err := sc.scrub()
				read += n
				if err != nil && ctx.Err() == nil {
					s.DiskErr = "reading it: " + reason(err)
				}
			}
			r.Close()
		}
		batch = append(batch, s)
		if len(batch) == o.Batch {
			if err := emit(batch, seen, read); err != nil {
				return err
			}
			batch = batch[:0]
		}
		return nil
	})
	if err != nil {
		return err
	}
	return emit(batch, seen, read)
}

// scrubber re-reads one stripe.
type scrubber struct {
	ctx  context.Context
	st   backend.Store
	r    backend.Reader
	m    backend.Meta
	s    *message.FsckStripe
	p    *pace
	done int64 // bytes the scan read before this stripe
	o    *scanOptions
}

// scrub reads the stripe and records whether its bytes match m: the
// frame crcs of an erasure-coded stripe; a replica's blocks against their
// sums and, when they all verify, its whole-file checksum. It returns the
// bytes read; a stripe whose length is already wrong is not read (its
// length is the finding). A plain file's only copy found damaged is
// marked so (its reads then fail at once); a replica's bad blocks are
// mended by the reads that meet them (heal.go) or by fsck repair. A
// replica without block sums gets them here if its bytes match its
// checksum.
func (sc *scrubber) scrub() (int64, error) {
	l, err := layout.Parse(sc.m.Layout)
	if err != nil || sc.r.Size() != erasure.StripeSize(l, sc.m.Size) {
		return 0, nil
	}
	if l.Kind == layout.EC {
		n, bad, err := scrubFrames(sc.ctx, sc.r, erasure.FromLayout(l), sc.m.Size, sc.s, sc.p, sc.done)
		sc.o.foundBad(bad)
		return n, err
	}
	typ := scrubType(sc.m.Checksums)
	var h hash.Hash
	if typ != "" {
		h, _ = checksum.New(typ)
	}
	var sums *checksum.BlockSummer
	if !sc.r.BlockSums() && typ != "" && sc.o.AddSums {
		sums = checksum.NewBlockSummer(checksum.BlockSize)
	}
	buf := make([]byte, 1<<20)
	size := sc.r.Size()
	var n int64
	var bad int
	var first *checksum.BlockError
	for off := int64(0); off < size; {
		if err := sc.ctx.Err(); err != nil {
			return n, err
		}
		m, err := sc.r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if h != nil {
			h.Write(buf[:m])
		}
		if sums != nil {
			sums.Write(buf[:m])
		}
		off += int64(m)
		n += int64(m)
		if err != nil && err != io.EOF {
			be, ok := checksum.AsBlockError(err)
			if !ok {
				return n, err
			}
			bad++
			if first == nil {
				first = be
			}
			h = nil // the whole-file checksum cannot be had any more
			off, n = be.Off+be.Len, n+be.Len
		} else if m == 0 {
			return n, io.ErrUnexpectedEOF
		}
		sc.p.wait(sc.ctx, float64(sc.done+n))
	}
	if bad > 0 {
		sc.o.foundBad(bad)
		sc.s.BlockErr = fmt.Sprintf("%d blocks fail their crc32c (first: %s)", bad, first)
		if l.Kind == layout.Plain {
			if err := sc.st.MarkDamaged(sc.m.Fid, "found by a scrub: "+sc.s.BlockErr); err != nil {
				return n, err
			}
		}
		return n, nil
	}
	if h == nil {
		return n, nil // nothing to compare with
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != sc.m.Checksums[typ] {
		sc.s.SumErr = fmt.Sprintf("%s %s of its bytes, %s in its metadata", typ, got, sc.m.Checksums[typ])
		return n, nil
	}
	if sums != nil {
		if err := sc.st.AddBlockSums(sc.m.Fid, checksum.BlockSize, sums.Sums(), size); err != nil {
			return n, fmt.Errorf("adding block sums: %w", err)
		}
		sc.o.Added++
	}
	return n, nil
}

// scrubType is the checksum a replica's scrub compares: adler32 or
// crc32c (computed at write time), else any other recorded.
func scrubType(sums map[string]string) string {
	for _, t := range []string{checksum.Adler32, checksum.CRC32C} {
		if sums[t] != "" {
			return t
		}
	}
	for _, t := range checksum.SortedTypes(sums) {
		if checksum.Valid(t) && sums[t] != "" {
			return t
		}
	}
	return ""
}

// scrubFrames checks the crc32c of every frame of an erasure-coded
// stripe; it returns the bytes read and the frames that failed.
func scrubFrames(ctx context.Context, r backend.Reader, l erasure.Layout, size int64, s *message.FsckStripe, p *pace, done int64) (int64, int, error) {
	frame := make([]byte, l.FrameSize())
	unit := l.Unit
	var n int64
	bad, first := 0, int64(-1)
	for row := range l.Rows(size) {
		if err := ctx.Err(); err != nil {
			return n, bad, err
		}
		m, err := r.ReadAt(frame, row*l.FrameSize())
		n += int64(m)
		if err != nil && !(errors.Is(err, io.EOF) && m == len(frame)) {
			return n, bad, err
		}
		if checksum.CRC32CSum(frame[:unit]) != binary.LittleEndian.Uint32(frame[unit:]) {
			bad++
			if first < 0 {
				first = row
			}
		}
		p.wait(ctx, float64(done+n))
	}
	if bad > 0 {
		s.BlockErr = fmt.Sprintf("%d of %d frames fail their crc32c (first: row %d)", bad, l.Rows(size), first)
	}
	return n, bad, nil
}

// pace spreads work over time: amount n is not done before n/rate
// seconds after start.
type pace struct {
	rate  float64
	start time.Time
}

func (p *pace) wait(ctx context.Context, n float64) {
	if p.rate <= 0 {
		return
	}
	d := time.Until(p.start.Add(time.Duration(n / p.rate * float64(time.Second))))
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
