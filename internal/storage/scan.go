package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
}

// walkStore walks st and reports every stripe it holds, with its metadata and
// length (and, scrubbing, whether its bytes match its checksums or frame
// crcs), to emit in batches of o.Batch, with the number of stripes walked
// and bytes read so far. It stops at the first error of emit or when ctx
// ends. The last batch (possibly empty) is emitted before it returns nil.
func walkStore(ctx context.Context, st backend.Store, o scanOptions, emit func(batch []message.FsckStripe, seen, read int64) error) error {
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
				n, err := scrub(ctx, r, m, &s, scrubPace, read)
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

// scrub reads r and records whether its bytes match m: the whole-file
// checksum of a replica, the frame crcs of an erasure-coded stripe. It
// returns the bytes read; a stripe whose length is already wrong is not
// read (its length is the finding).
func scrub(ctx context.Context, r backend.Reader, m backend.Meta, s *message.FsckStripe, p *pace, done int64) (int64, error) {
	l, err := layout.Parse(m.Layout)
	if err != nil || r.Size() != erasure.StripeSize(l, m.Size) {
		return 0, nil
	}
	if l.Kind == layout.EC {
		return scrubFrames(ctx, r, erasure.FromLayout(l), m.Size, s, p, done)
	}
	typ := ""
	for _, t := range []string{checksum.Adler32, checksum.CRC32C} {
		if m.Checksums[t] != "" {
			typ = t
			break
		}
	}
	if typ == "" {
		for _, t := range checksum.SortedTypes(m.Checksums) {
			if checksum.Valid(t) && m.Checksums[t] != "" {
				typ = t
				break
			}
		}
	}
	if typ == "" {
		return 0, nil // nothing to compare with
	}
	pr := &pacedReader{ctx: ctx, r: io.NewSectionReader(r, 0, r.Size()), p: p, done: done}
	got, _, n, err := checksum.Recompute(pr, typ, nil)
	if err != nil {
		return n, err
	}
	if got != m.Checksums[typ] {
		s.SumErr = fmt.Sprintf("%s %s of its bytes, %s in its metadata", typ, got, m.Checksums[typ])
	}
	return n, nil
}

// scrubFrames checks the crc32c of every frame of an erasure-coded stripe.
func scrubFrames(ctx context.Context, r backend.Reader, l erasure.Layout, size int64, s *message.FsckStripe, p *pace, done int64) (int64, error) {
	frame := make([]byte, l.FrameSize())
	unit := l.Unit
	var n int64
	bad, first := 0, int64(-1)
	for row := range l.Rows(size) {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, err := r.ReadAt(frame, row*l.FrameSize())
		n += int64(m)
		if err != nil && !(errors.Is(err, io.EOF) && m == len(frame)) {
			return n, err
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
	return n, nil
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

// pacedReader reads at the scrub's pace.
type pacedReader struct {
	ctx  context.Context
	r    io.Reader
	p    *pace
	done int64
	n    int64
}

func (r *pacedReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(b)
	r.n += int64(n)
	r.p.wait(r.ctx, float64(r.done+r.n))
	return n, err
}
