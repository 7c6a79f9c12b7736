package storage

// Data movement (drain, balance, conversion): the storage server that
// will hold the new stripe runs the copy through the one mover (package
// transfer) on the namespace server's order, and answers once the copy is
// durable and verified. The ends are stripe-level:
//
//   - a stripe read whole from a filesystem, here or on a peer in one
//     streamed request (for a replica, any replica will do: they are
//     the same bytes), never from a stripe the order says to avoid (on
//     a filesystem the namespace knows is down, offline or lost);
//   - an erasure-coded stripe rebuilt from the file's other stripes
//     (erasure.Repair), when its own copy cannot be read or is damaged;
//   - a new stripe on a filesystem here, finished with the file's
//     metadata only if what arrived checks out: the file's checksum for a
//     replica (the mover compares it with the recorded one), every
//     frame's crc32c and the shard length for an EC stripe.
//
// A copy whose order says to yield (a rebuild at its default rate)
// gives way to the server's client streams (background.go).
//
// A conversion copies the whole file (any layout, decoded) into a staged
// upload with the new layout, checksums computed while streaming and
// compared with the recorded ones by the mover; the namespace switches it
// in. Nothing here registers anything: a copy that fails is removed, one
// that succeeds is only a file until the namespace switches it in.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// moveWait is how long a move waits for stream memory.
const moveWait = 2 * time.Minute

// moveMemory is what one move holds: the mover's pieces, the new
// stripe's writer and, for a rebuild, the decoder's rows.
func moveMemory(l layout.Layout, writer int64) int64 {
	return 4*transfer.PieceSize + writer + readMemory(l)
}

// MoveStripe carries out a move order: it writes a copy of the stripe
// the move capability names on the target filesystem, which must be here
// and writable, copying it from its place (or, for a replica, from any
// replica) or rebuilding it from the other stripes of an erasure-coded
// file. rate caps the bytes per second (0: none).
func (s *Server) MoveStripe(ctx context.Context, o message.MoveOrder) (message.MoveResult, error) {
	c, err := s.Verify(o.Token, capability.Access{Internal: true})
	if err != nil {
		return message.MoveResult{}, err
	}
	if c.Move == nil || c.Write {
		return message.MoveResult{}, kerr.New(kerr.Permission, "move", c.Path, "capability is not a move order")
	}
	l, err := layout.Parse(c.Layout)
	if err != nil {
		return message.MoveResult{}, kerr.WithOp(err, "move")
	}
	i := c.Move.Stripe
	if i < 0 || i >= len(c.Targets) || len(c.Targets) != l.Stripes() {
		return message.MoveResult{}, kerr.New(kerr.Invalid, "move", c.Path, fmt.Sprintf("bad stripe %d of %d", i, len(c.Targets)))
	}
	f := s.local(c.Move.Dst.FsID)
	if f == nil {
		return message.MoveResult{}, kerr.New(kerr.NotFound, "move", c.Path, fmt.Sprintf("filesystem %d is not on this server", c.Move.Dst.FsID))
	}
	// Whether the target takes new stripes is the namespace's call, made
	// when it ordered the move: this server learns a configstatus change
	// one heartbeat later (an order right after `fs config ID
	// configstatus=rw` would meet "ro" here). Only an offline target is
	// refused.
	if why := f.offlineReason(); why != "" {
		return message.MoveResult{}, kerr.New(kerr.Unavailable, "move", f.root, "filesystem is offline: "+why)
	}
	release, err := s.budget.acquire(ctx, moveMemory(l, f.store.WriteMemory(backend.CreateOptions{Overlap: true})), moveWait, "move", c.Path)
	if err != nil {
		return message.MoveResult{}, err
	}
	defer release()
	opts := transfer.Options{Rate: o.Rate}
	sd := &stripeDest{f: f, c: c, idx: i}
	var dst transfer.Destination = sd
	var bg *background
	if o.Yield {
		bg = s.bg
		dst = yieldingDest{sd, bg}
	}
	avoid := map[int]bool{}
	for _, j := range o.Avoid {
		avoid[j] = true
	}
	what := fmt.Sprintf("%s stripe %d", c.Path, i)
	if l.Kind == layout.EC {
		el := ecLayout(l)
		sd.frames = el
		opts.Checksum = "none" // every frame carries its crc32c: checked by the destination
		tried := fmt.Sprintf("own copy: fs %d cannot be read", c.Targets[i].FsID)
		if !avoid[i] {
			res, err := transfer.Copy(ctx, &stripeSrc{s: s, c: c, token: o.Token, idx: i, size: el.ShardSize(c.Size), bg: bg}, dst, opts)
			if err == nil {
				return message.MoveResult{Bytes: res.Bytes, How: message.MovedCopy, Checksum: "crc32c frames"}, nil
			}
			if ctx.Err() != nil || kerr.Is(err, kerr.Exists) {
				return message.MoveResult{}, kerr.Wrap(transfer.KindOf(err), "move", what, err)
			}
			tried = "own copy: " + reason(err)
		}
		res, err := transfer.Copy(ctx, &rebuiltStripe{s: s, c: c, token: o.Token, idx: i, l: el, avoid: avoid, bg: bg}, dst, opts)
		if err != nil {
			return message.MoveResult{}, kerr.Wrap(transfer.KindOf(err), "move", what, fmt.Errorf("%s; rebuild: %w", tried, err))
		}
		return message.MoveResult{Bytes: res.Bytes, How: message.MovedRebuilt, Checksum: "crc32c frames", Tried: tried}, nil
	}
	// A plain file has one source; a replica may come from any replica,
	// those here first.
	order := []int{i}
	if l.Kind == layout.Replica {
		order = order[:0]
		for j, t := range c.Targets {
			if s.local(t.FsID) != nil && t.FsID != c.Move.Dst.FsID {
				order = append(order, j)
			}
		}
		for j, t := range c.Targets {
			if s.local(t.FsID) == nil {
				order = append(order, j)
			}
		}
	}
	var tried []string
	for _, j := range order {
		if avoid[j] {
			tried = append(tried, fmt.Sprintf("replica %d (fs %d): cannot be read", j, c.Targets[j].FsID))
			continue
		}
		res, err := transfer.Copy(ctx, &stripeSrc{s: s, c: c, token: o.Token, idx: j, size: c.Size, bg: bg}, dst, opts)
		if err == nil {
			return message.MoveResult{Bytes: res.Bytes, How: message.MovedCopy, Checksum: res.Type + "=" + res.Checksum,
				Tried: strings.Join(tried, "; ")}, nil
		}
		tried = append(tried, fmt.Sprintf("replica %d (fs %d): %s", j, c.Targets[j].FsID, reason(err)))
		if ctx.Err() != nil || kerr.Is(err, kerr.Exists) {
			break
		}
	}
	return message.MoveResult{}, kerr.New(kerr.IO, "move", what, "no source could be copied: "+strings.Join(tried, "; "))
}

// stripeSrc is stripe idx of the file c names, read whole from its
// filesystem: here, or through the peer holding it in one streamed
// request; through bg when set (giving way to client streams).
type stripeSrc struct {
	s     *Server
	c     *capability.Capability
	token string
	idx   int
	size  int64
	bg    *background
}

func (r *stripeSrc) String() string {
	return fmt.Sprintf("stripe %d of %s on fs %d", r.idx, r.c.Path, r.c.Targets[r.idx].FsID)
}

func (r *stripeSrc) Open(ctx context.Context) (transfer.Reader, error) {
	rd, err := r.open(ctx)
	if err != nil || r.bg == nil {
		return rd, err
	}
	return yieldingReader{rd, ctx, r.bg}, nil
}

func (r *stripeSrc) open(ctx context.Context) (transfer.Reader, error) {
	t := r.c.Targets[r.idx]
	var sums map[string]string
	if l, _ := layout.Parse(r.c.Layout); l.Kind != layout.EC {
		sums = r.c.Sums // a replica is the file
	}
	if f := r.s.local(t.FsID); f != nil {
		if why := f.offlineReason(); why != "" {
			return nil, kerr.New(kerr.Unavailable, "read", r.String(), "filesystem is offline: "+why)
		}
		rd, err := r.s.openLocal(f, r.c, r.token, r.idx)
		if err != nil {
			return nil, err
		}
		if rd.Size() != r.size {
			rd.Close()
			return nil, kerr.New(kerr.IO, "read", r.String(), fmt.Sprintf("holds %d bytes, want %d", rd.Size(), r.size))
		}
		return &sectionReader{Reader: io.NewSectionReader(rd, 0, r.size), c: rd, size: r.size, sums: sums}, nil
	}
	p, err := r.s.peers("move", r.c.Path)
	if err != nil {
		return nil, err
	}
	st, err := openPeerStream(ctx, p, t.Addr, r.c.Fid, r.idx, r.token)
	if err != nil {
		return nil, kerr.New(kerr.Unavailable, "read", r.String(), reason(err))
	}
	return &sectionReader{Reader: io.LimitReader(st, r.size), c: st, size: r.size, sums: sums}, nil
}

// sectionReader is an open stripe as a transfer.Reader.
type sectionReader struct {
	io.Reader
	c    io.Closer // nil for a peer's stripe
	size int64
	sums map[string]string
}

func (r *sectionReader) Close() error {
	if r.c != nil {
		return r.c.Close()
	}
	return nil
}
func (r *sectionReader) Size() int64                  { return r.size }
func (r *sectionReader) Checksums() map[string]string { return r.sums }

// rebuiltStripe is stripe idx of an erasure-coded file decoded from its
// other stripes but those to avoid, row by row, as it is read (each
// peer's stripe through one streamed request); through bg when set.
type rebuiltStripe struct {
	s     *Server
	c     *capability.Capability
	token string
	idx   int
	l     erasure.Layout
	avoid map[int]bool
	bg    *background
}

func (r *rebuiltStripe) String() string {
	return fmt.Sprintf("stripe %d of %s rebuilt from the others", r.idx, r.c.Path)
}

func (r *rebuiltStripe) Open(ctx context.Context) (transfer.Reader, error) {
	shards := make([]erasure.ShardReader, len(r.c.Targets))
	var closers []io.Closer
	var remote []int
	avail := 0
	for j, t := range r.c.Targets {
		if j == r.idx || r.avoid[j] || r.c.IsStale(j) {
			continue
		}
		f := r.s.local(t.FsID)
		if f == nil {
			remote = append(remote, j) // the peer serves it only at the file's version
			continue
		}
		if f.offlineReason() != "" || r.s.current(f, r.c, j) != nil {
			continue // a stale stripe's frames verify, but hold the version before
		}
		if rd, err := f.store.Open(r.c.Fid); err == nil {
			shards[j] = rd
			closers = append(closers, rd)
			avail++
		}
	}
	if peers, err := r.s.peers("move", r.c.Path); err == nil && len(remote) > 0 {
		// Only stripes whose servers answer: a dead one would fail every
		// row. The request that answers is the one the stripe streams
		// through.
		streams := make([]*peerStream, len(r.c.Targets))
		var wg sync.WaitGroup
		for _, j := range remote {
			wg.Add(1)
			go func() {
				defer wg.Done()
				streams[j], _ = openPeerStream(ctx, peers, r.c.Targets[j].Addr, r.c.Fid, j, r.token)
			}()
		}
		wg.Wait()
		for _, j := range remote {
			if st := streams[j]; st != nil {
				shards[j] = st
				closers = append(closers, st)
				avail++
			}
		}
	}
	if r.bg != nil {
		for j, sh := range shards {
			if sh != nil {
				shards[j] = yieldingShard{sh, ctx, r.bg}
			}
		}
	}
	closeAll := func() {
		for _, c := range closers {
			c.Close()
		}
	}
	if avail < r.l.K {
		closeAll()
		return nil, kerr.New(kerr.Unavailable, "rebuild", r.String(), fmt.Sprintf("%d other stripes reachable, need %d", avail, r.l.K))
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := erasure.Repair(r.l, r.c.Size, shards, map[int]io.Writer{r.idx: pw})
		closeAll()
		pw.CloseWithError(err)
	}()
	return &sectionReader{Reader: pr, c: pr, size: r.l.ShardSize(r.c.Size)}, nil
}

// stripeDest is the new stripe idx of the file c names on filesystem f.
// frames, when set, is the EC geometry every frame is checked against.
type stripeDest struct {
	f      *filesystem
	c      *capability.Capability
	idx    int
	frames erasure.Layout
}

func (d *stripeDest) String() string {
	return fmt.Sprintf("stripe %d of %s on fs %d", d.idx, d.c.Path, d.f.id)
}

func (d *stripeDest) Create(context.Context, int64) (transfer.Writer, error) {
	if why := d.f.offlineReason(); why != "" {
		return nil, kerr.New(kerr.Unavailable, "move", d.f.root, "filesystem is offline: "+why)
	}
	w, err := d.f.store.Create(d.c.Fid, framed(d.c.Layout))
	if err != nil {
		return nil, err
	}
	sw := &stripeWriter{w: w, d: d}
	if d.frames.K > 0 {
		if sw.check, err = erasure.NewFrameChecker(d.frames, d.c.Size); err != nil {
			w.Abort()
			return nil, err
		}
	}
	return sw, nil
}

type stripeWriter struct {
	w     backend.Writer
	d     *stripeDest
	check *erasure.FrameChecker
}

func (w *stripeWriter) Write(p []byte) (int, error) {
	if w.check != nil {
		w.check.Write(p)
	}
	return w.w.Write(p)
}

// Commit finishes the stripe (durable, with the file's metadata) if
// what was written checks out; otherwise it is removed.
func (w *stripeWriter) Commit(context.Context) error {
	if w.check != nil {
		if err := w.check.Err(); err != nil {
			w.w.Abort()
			return err
		}
	}
	return w.w.Finish(backend.Meta{Fid: w.d.c.Fid, Stripe: w.d.idx, Layout: w.d.c.Layout, Size: w.d.c.Size,
		Checksums: w.d.c.Sums, Path: w.d.c.Path, Version: w.d.c.DataVersion})
}

func (w *stripeWriter) Abort(context.Context) { w.w.Abort() }

// Convert carries out a conversion order: the whole file the read
// capability names, decoded whatever its layout, is written into the
// staged upload the write capability names (its stripes here and on
// peers, checksums computed while streaming); the mover compares the
// checksum with the recorded one before the stripes are finished. The
// namespace switches the copy in.
func (s *Server) Convert(ctx context.Context, o message.ConvertOrder) (message.ConvertResult, error) {
	rc, err := s.Verify(o.Read, capability.Access{Internal: true})
	if err != nil {
		return message.ConvertResult{}, err
	}
	wc, err := s.Verify(o.Write, capability.Access{Write: true, Internal: true})
	if err != nil {
		return message.ConvertResult{}, err
	}
	if !wc.Staged || rc.Internal() {
		return message.ConvertResult{}, kerr.New(kerr.Permission, "convert", rc.Path, "capabilities are not a conversion order")
	}
	dst := &stagedDest{s: s, c: wc, token: o.Write}
	res, err := transfer.Copy(ctx, &fileSrc{s: s, c: rc, token: o.Read}, dst, transfer.Options{Rate: o.Rate})
	if err != nil {
		return message.ConvertResult{}, kerr.Wrap(transfer.KindOf(err), "convert", rc.Path, err)
	}
	return message.ConvertResult{Size: res.Bytes, Checksums: dst.sums}, nil
}

// fileSrc is a committed file read whole through this server.
type fileSrc struct {
	s     *Server
	c     *capability.Capability
	token string
}

func (f *fileSrc) String() string { return "kaon:" + f.c.Path }

func (f *fileSrc) Open(ctx context.Context) (transfer.Reader, error) {
	sf, err := f.s.open(ctx, f.c, f.token, moveWait) // not a client stream: a conversion
	if err != nil {
		return nil, err
	}
	if err := CheckReadable(sf); err != nil {
		sf.Close()
		return nil, kerr.Wrap(kerr.IO, "read", f.c.Path, err)
	}
	return &sectionReader{Reader: io.NewSectionReader(sf, 0, f.c.Size), c: sf, size: f.c.Size, sums: f.c.Sums}, nil
}

// stagedDest is a conversion's staged copy through this server as its
// entry.
type stagedDest struct {
	s     *Server
	c     *capability.Capability
	token string
	sums  map[string]string // once committed
}

func (d *stagedDest) String() string { return fmt.Sprintf("kaon:%s (as %s)", d.c.Path, d.c.Layout) }

func (d *stagedDest) Create(ctx context.Context, _ int64) (transfer.Writer, error) {
	u, err := d.s.newUpload(ctx, d.c, d.token, moveWait)
	if err != nil {
		return nil, err
	}
	return &stagedWriter{u: u, d: d}, nil
}

type stagedWriter struct {
	u *Upload
	d *stagedDest
}

var _ transfer.Hasher = (*stagedWriter)(nil)

func (w *stagedWriter) Write(p []byte) (int, error) { return w.u.Write(p) }
func (w *stagedWriter) Abort(ctx context.Context)   { w.u.Abort(ctx) }
func (w *stagedWriter) Computes(typ string) bool    { return w.u.Computes(typ) }
func (w *stagedWriter) Sum(typ string) string       { return w.u.Sums()[typ] }
func (w *stagedWriter) Commit(ctx context.Context) error {
	if err := w.u.Commit(ctx); err != nil {
		return err
	}
	w.d.sums = w.u.Sums()
	return nil
}
