package storage

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// Rebuilds (fsck repair): the namespace server plans which stripes of a
// file to rebuild where they are registered (fsck.PlanRepair) and sends
// the job to the storage server holding them (Server.Repair). An
// erasure-coded stripe is decoded from K others (erasure.Repair, then the
// whole file's frames and parity are verified); a replica is copied from
// a healthy one through the mover (transfer.Copy), which verifies the
// file's checksum end to end before the new copy is finished. Stripes are
// rebuilt in place: moving them elsewhere is the job of drain and
// balance, whose stripe mover (move.go) can take this one's place (the
// stripeSet seam is the same).

// stripedFile is a file as a rebuild sees it: its record, from the
// repair's capability, and the filesystem of each stripe.
type stripedFile struct {
	Fid       uint64
	Path      string
	Layout    string
	Size      int64
	Checksums map[string]string
	Locations []uint32
	Version   uint64 // data version
}

// stripeSet is how a rebuild reaches the stripes of one file: wherever they
// are (this storage server or another), and to write the ones to rebuild
// (on this server).
type stripeSet interface {
	// Open opens stripe i for reading.
	Open(ctx context.Context, i int) (io.ReaderAt, func(), error)
	// Replace removes stripe i, if it is there, and starts it anew.
	Replace(ctx context.Context, i int) (backend.Writer, error)
}

// rebuildStripes writes stripes rebuild of f anew from its other stripes.
func rebuildStripes(ctx context.Context, f *stripedFile, rebuild []int, st stripeSet) error {
	l, err := layout.Parse(f.Layout)
	if err != nil {
		return kerr.WithOp(err, "repair")
	}
	if len(rebuild) == 0 {
		return nil
	}
	for _, i := range rebuild {
		if i < 0 || i >= len(f.Locations) {
			return kerr.New(kerr.Invalid, "repair", f.Path, fmt.Sprintf("no stripe %d", i))
		}
	}
	if l.Kind == layout.EC {
		return rebuildEC(ctx, f, erasure.FromLayout(l), rebuild, st)
	}
	for _, i := range rebuild {
		if err := replicate(ctx, f, i, rebuild, st); err != nil {
			return err
		}
	}
	return nil
}

func (f *stripedFile) meta(i int) backend.Meta {
	return backend.Meta{Fid: f.Fid, Stripe: i, Layout: f.Layout, Size: f.Size, Checksums: f.Checksums, Path: f.Path, Version: f.Version}
}

// rebuildEC decodes the stripes rebuild from the others, row by row, then
// checks every frame and the parity of the whole file.
func rebuildEC(ctx context.Context, f *stripedFile, l erasure.Layout, rebuild []int, st stripeSet) (err error) {
	n := l.Shards()
	shards := make([]erasure.ShardReader, n)
	var reasons []string
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	avail := 0
	for i := range n {
		if slices.Contains(rebuild, i) {
			continue
		}
		r, done, err := st.Open(ctx, i)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("stripe %d: %v", i, err))
			continue
		}
		shards[i], closers = r, append(closers, done)
		avail++
	}
	if avail < l.K {
		return kerr.New(kerr.Unavailable, "repair", f.Path, fmt.Sprintf("%d stripes readable, need %d (%s)", avail, l.K, strings.Join(reasons, "; ")))
	}
	ws := map[int]backend.Writer{}
	abort := func() {
		for _, w := range ws {
			w.Abort()
		}
	}
	targets := map[int]io.Writer{}
	for _, i := range rebuild {
		w, err := st.Replace(ctx, i)
		if err != nil {
			abort()
			return kerr.Wrap(kerr.KindOf(err), "repair", f.Path, fmt.Errorf("stripe %d: %w", i, err))
		}
		ws[i], targets[i] = w, w
	}
	alsoBad, err := erasure.Repair(l, f.Size, shards, targets)
	if err != nil {
		abort()
		return kerr.Wrap(kerr.IO, "repair", f.Path, fmt.Errorf("decoding (stripes also bad: %v): %w", alsoBad, err))
	}
	for _, i := range rebuild {
		if err := ws[i].Finish(f.meta(i)); err != nil {
			abort()
			return kerr.Wrap(kerr.KindOf(err), "repair", f.Path, fmt.Errorf("stripe %d: %w", i, err))
		}
	}
	// Read back: every frame of every stripe, and the parity of every row.
	for _, i := range rebuild {
		r, done, err := st.Open(ctx, i)
		if err != nil {
			return kerr.Wrap(kerr.IO, "repair", f.Path, fmt.Errorf("rebuilt stripe %d: %w", i, err))
		}
		shards[i], closers = r, append(closers, done)
	}
	bad, err := erasure.Verify(l, f.Size, shards)
	for _, i := range bad {
		if slices.Contains(rebuild, i) {
			return kerr.New(kerr.IO, "repair", f.Path, fmt.Sprintf("rebuilt stripe %d does not verify", i))
		}
	}
	if err != nil {
		return kerr.Wrap(kerr.IO, "repair", f.Path, err)
	}
	return nil
}

// replicate copies a healthy replica into stripe i through the mover,
// trying each other replica until one's bytes match the file's checksum.
func replicate(ctx context.Context, f *stripedFile, i int, rebuild []int, st stripeSet) error {
	var reasons []string
	for j := range f.Locations {
		if slices.Contains(rebuild, j) {
			continue
		}
		_, err := transfer.Copy(ctx, replicaSource{f, j, st}, replicaDest{f, i, st}, transfer.Options{})
		if err == nil {
			return nil
		}
		reasons = append(reasons, err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "no other replica")
	}
	return kerr.New(kerr.Unavailable, "repair", f.Path, fmt.Sprintf("stripe %d: no healthy replica to copy (%s)", i, strings.Join(reasons, "; ")))
}

// replicaSource is replica j of f as a mover source: it vouches for the
// namespace's checksums, so the mover verifies what it copied.
type replicaSource struct {
	f  *stripedFile
	j  int
	st stripeSet
}

func (s replicaSource) String() string {
	return fmt.Sprintf("stripe %d of %s (fs %d)", s.j, s.f.Path, s.f.Locations[s.j])
}

func (s replicaSource) Open(ctx context.Context) (transfer.Reader, error) {
	r, done, err := s.st.Open(ctx, s.j)
	if err != nil {
		return nil, err
	}
	if sz, ok := r.(interface{ Size() int64 }); ok && sz.Size() != s.f.Size {
		done()
		return nil, kerr.New(kerr.IO, "repair", s.String(), fmt.Sprintf("%d bytes, the file has %d", sz.Size(), s.f.Size))
	}
	return &replicaReader{Reader: io.NewSectionReader(r, 0, s.f.Size), done: done, f: s.f}, nil
}

type replicaReader struct {
	io.Reader
	done func()
	f    *stripedFile
}

func (r *replicaReader) Close() error                 { r.done(); return nil }
func (r *replicaReader) Size() int64                  { return r.f.Size }
func (r *replicaReader) Checksums() map[string]string { return r.f.Checksums }

// replicaDest is stripe i of f, written anew, as a mover destination.
type replicaDest struct {
	f  *stripedFile
	i  int
	st stripeSet
}

func (d replicaDest) String() string {
	return fmt.Sprintf("stripe %d of %s (fs %d)", d.i, d.f.Path, d.f.Locations[d.i])
}

func (d replicaDest) Create(ctx context.Context, size int64) (transfer.Writer, error) {
	if size >= 0 && size != d.f.Size {
		return nil, kerr.New(kerr.IO, "repair", d.String(), fmt.Sprintf("source has %d bytes, the file %d", size, d.f.Size))
	}
	w, err := d.st.Replace(ctx, d.i)
	if err != nil {
		return nil, err
	}
	return &replicaWriter{w: w, m: d.f.meta(d.i)}, nil
}

type replicaWriter struct {
	w backend.Writer
	m backend.Meta
}

func (w *replicaWriter) Write(p []byte) (int, error)  { return w.w.Write(p) }
func (w *replicaWriter) Commit(context.Context) error { return w.w.Finish(w.m) }
func (w *replicaWriter) Abort(context.Context)        { w.w.Abort() }
