package storage

import (
	"context"
	"fmt"
	"github.com/kaon-storage/kaon/internal/bufmem"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// File is an open committed file: a ReaderAt over its logical bytes,
// whatever the layout.
type File interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// emptyFile is a file of no bytes.
type emptyFile struct{ *strings.Reader }

func (emptyFile) Close() error { return nil }

// open opens the committed file a read capability names. Replicas are tried
// local first (replica.go); an EC file is decoded from any K healthy
// stripes, once the memory its decoding needs is free (waiting up to wait).
func (s *Server) open(ctx context.Context, c *capability.Capability, token string, wait time.Duration) (File, error) {
	l, err := layout.Parse(c.Layout)
	if err != nil {
		return nil, err
	}
	if len(c.Targets) == 0 && c.Size == 0 {
		return emptyFile{strings.NewReader("")}, nil
	}
	if l.Kind == layout.EC {
		release, err := s.budget.acquire(ctx, readMemory(l), wait, "read", c.Path)
		if err != nil {
			return nil, err
		}
		f, err := s.openEC(ctx, c, token, l)
		if err != nil {
			release()
			return nil, err
		}
		f.release = release
		return f, nil
	}
	return s.openReplicas(ctx, c, token)
}

// openEC opens the stripes of an erasure-coded file. Fewer than K
// reachable stripes fail here, before a client is told anything, rather
// than in the middle of a transfer.
func (s *Server) openEC(ctx context.Context, c *capability.Capability, token string, l layout.Layout) (*ecFile, error) {
	shards := make([]erasure.ShardReader, len(c.Targets))
	e := &ecFile{s: s, c: c, token: token}
	var reasons []string
	var remote []int
	avail := 0
	for i, t := range c.Targets {
		if c.IsStale(i) {
			continue
		}
		f := s.local(t.FsID)
		if f == nil {
			remote = append(remote, i)
			continue
		}
		if err := s.current(f, c, i); err != nil {
			reasons = append(reasons, fmt.Sprintf("stripe %d (fs %d): %v", i, t.FsID, reason(err)))
			continue
		}
		r, err := f.store.Open(c.Fid)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("stripe %d (fs %d): %v", i, t.FsID, reason(err)))
			continue
		}
		e.stripes = append(e.stripes, r)
		shards[i] = r
		avail++
	}
	var peers Peers
	if len(remote) > 0 {
		p, err := s.peers("open", c.Path)
		if err != nil {
			for _, i := range remote {
				reasons = append(reasons, fmt.Sprintf("stripe %d (fs %d): %v", i, c.Targets[i].FsID, reason(err)))
			}
			remote = nil
		}
		peers = p
	}
	if avail < l.K && len(remote) > 0 {
		// Not enough here: find out which remote stripes exist before
		// promising the file.
		errs := make([]error, len(c.Targets))
		var wg sync.WaitGroup
		for _, i := range remote {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, probeTimeout)
				defer cancel()
				errs[i] = peers.ProbeStripe(pctx, c.Targets[i].Addr, c.Fid, i, token)
			}()
		}
		wg.Wait()
		var found []int
		for _, i := range remote {
			if errs[i] != nil {
				reasons = append(reasons, fmt.Sprintf("stripe %d (fs %d): %v", i, c.Targets[i].FsID, errs[i]))
			} else {
				found = append(found, i)
			}
		}
		remote = found
	}
	for _, i := range remote {
		shards[i] = peers.StripeReader(ctx, c.Targets[i].Addr, c.Fid, i, token)
		avail++
	}
	if avail < l.K {
		e.closeStripes()
		return nil, kerr.New(kerr.Unavailable, "open", c.Path, fmt.Sprintf("unrecoverable: %d of %d stripes readable, need %d (%s)",
			avail, len(c.Targets), l.K, strings.Join(reasons, "; ")))
	}
	r, err := erasure.NewReader(ecLayout(l), c.Size, shards)
	if err != nil {
		e.closeStripes()
		return nil, kerr.Wrap(kerr.IO, "open", c.Path, err)
	}
	r.SetName(c.Path)
	e.Reader = r
	return e, nil
}

// probeTimeout bounds the question whether a peer holds a stripe.
const probeTimeout = 10 * time.Second

type ecFile struct {
	*erasure.Reader
	s       *Server
	c       *capability.Capability
	token   string
	stripes []backend.Reader // the local ones
	release func()           // returns the decoding memory to the budget
}

// Close records stripes found missing or damaged while the file was read
// (and served by reconstruction): nothing else would notice them. Those
// whose bytes were wrong are rebuilt in the background (heal.go).
func (e *ecFile) Close() error {
	e.Reader.Close()
	e.closeStripes()
	e.release()
	if dmg := e.Damage(); len(dmg) > 0 {
		var parts []string
		for i := range e.c.Targets {
			if why, bad := dmg[i]; bad {
				parts = append(parts, fmt.Sprintf("stripe %d (fs %d): %s", i, e.c.Targets[i].FsID, why))
			}
		}
		e.s.log.Warn("erasure-coded file has damaged stripes; data was reconstructed", "path", e.c.Path,
			"fid", e.c.Fid, "damage", strings.Join(parts, "; "))
		for i, why := range dmg {
			if erasure.Corrupt(why) {
				e.s.healEC(e.c, e.token, i, why)
			}
		}
	}
	return nil
}

func (e *ecFile) closeStripes() {
	for _, r := range e.stripes {
		r.Close()
	}
	e.stripes = nil
}

// Striped reports whether f is decoded from erasure-coded stripes (whole
// reads of it are best streamed with Copy, ranges with ReadAt).
func Striped(f File) bool { _, ok := unwrapClient(f).(*ecFile); return ok }

// CheckReadable reads the first byte of f, so that a file that cannot be
// read (an erasure-coded one whose first row does not decode) fails before
// a client is told anything, rather than in the middle of a transfer.
func CheckReadable(f File) error {
	if f.Size() == 0 {
		return nil
	}
	_, err := f.ReadAt(make([]byte, 1), 0)
	if err == io.EOF && f.Size() == 1 {
		err = nil
	}
	return err
}

// Copy writes the whole of client (an Open file) to w the cheapest way:
// erasure-coded rows straight out (read ahead while written), a local
// file without block sums through w's ReadFrom (sendfile to a socket),
// anything else in 1 MiB pieces, each read (and verified) before it is
// written; the bytes are accounted to the client (Served).
func Copy(w io.Writer, client File) (n int64, err error) {
	defer func() { Served(client, n) }() // f's reads below are not the client file's
	f := unwrapClient(client)
	if ec, ok := f.(*ecFile); ok {
		return ec.WriteRange(w, 0, ec.Size())
	}
	if of, ok := f.(backend.OSFile); ok {
		osf := of.OSFile()
		if _, err := osf.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
		return io.Copy(w, io.LimitReader(osf, f.Size()))
	}
	piece := pieceBufs.Get()
	defer pieceBufs.Put(piece)
	for n < f.Size() {
		m, err := f.ReadAt(piece[:min(int64(len(piece)), f.Size()-n)], n)
		if m > 0 {
			if _, werr := w.Write(piece[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
		}
		if err != nil && err != io.EOF {
			return n, err
		}
		if m == 0 {
			return n, io.ErrUnexpectedEOF
		}
	}
	return n, nil
}

// pieceBufs are Copy's buffers: a piece is read (and its blocks verified)
// whole before it is written.
var pieceBufs = bufmem.Sized(pieceSize)

// pieceSize is the piece a verified read is read and sent in.
const pieceSize = 1 << 20
