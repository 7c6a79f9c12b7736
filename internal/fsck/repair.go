package fsck

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// Repair. The namespace server plans (Plan): which stripes of a file to
// rebuild where they are registered, and which copies to drop (orphans
// after a grace time, copies the namespace does not register). A storage
// server holding the stripes to rebuild runs Rebuild: an erasure-coded
// stripe is decoded from K others (erasure.Repair, then the whole file's
// frames and parity are verified); a replica is copied from a healthy one
// through the mover (transfer.Copy), which verifies the file's checksum
// end to end before the new copy is finished. Stripes are rebuilt in
// place: moving them elsewhere is the job of drain and balance, whose
// stripe mover can take Rebuild's place (the Stripes seam is the same).

// Plan is what repairing the findings of one file does.
type Plan struct {
	Rebuild []int     // stripe indices to rebuild on their registered filesystems
	Drop    []Finding // copies to remove (orphans, unregistered copies)
	Skip    []Skipped // findings left alone, and why
}

// Skipped is a finding a repair leaves, with the reason.
type Skipped struct {
	Finding
	Why string
}

// PlanRepair decides what to do about the findings todo of one file (all
// of one fid), given the namespace's record of it (nil: none) and every
// finding about it (to know which stripes are healthy sources). Orphans
// younger than grace are kept.
func PlanRepair(f *File, todo, all []Finding, grace time.Duration, now time.Time) Plan {
	var p Plan
	skip := func(x Finding, why string) { p.Skip = append(p.Skip, Skipped{x, why}) }
	bad := map[int]bool{} // stripes unusable as sources
	for _, x := range all {
		if x.Class.BadCopy() && f != nil && x.Stripe >= 0 && x.Stripe < len(f.Locations) && f.Locations[x.Stripe] == x.FsID {
			bad[x.Stripe] = true
		}
	}
	// Stripes to rebuild first: whether copies may be dropped depends on
	// whether damage remains.
	var drops []Finding
	for _, x := range todo {
		switch {
		case x.Class == Orphan:
			switch {
			case f != nil:
				skip(x, "the namespace has a file with this fid again: scan again")
			case now.Sub(x.First) < grace:
				skip(x, fmt.Sprintf("found %v ago, dropped only after the grace time of %v", now.Sub(x.First).Round(time.Second), grace))
			default:
				p.Drop = append(p.Drop, x)
			}
		case f == nil:
			skip(x, "the file is gone from the namespace")
		case x.Class == Unreg || x.Class == ReplicaDiff:
			drops = append(drops, x)
		case x.Class.BadCopy():
			if x.Stripe < 0 || x.Stripe >= len(f.Locations) || f.Locations[x.Stripe] != x.FsID {
				skip(x, "the namespace registers this stripe elsewhere now: scan again")
				continue
			}
			if !slices.Contains(p.Rebuild, x.Stripe) {
				p.Rebuild = append(p.Rebuild, x.Stripe)
			}
		default:
			skip(x, "no repair for this class")
		}
	}
	slices.Sort(p.Rebuild)
	if why := rebuildable(f, p.Rebuild, bad, all); why != "" {
		for _, x := range todo {
			if x.Class.BadCopy() && slices.Contains(p.Rebuild, x.Stripe) {
				skip(x, why)
			}
		}
		p.Rebuild = nil
	}
	damaged := false
	for i := range bad {
		if !slices.Contains(p.Rebuild, i) {
			damaged = true
		}
	}
	for _, x := range drops {
		switch {
		case x.FsID == 0:
			skip(x, "the namespace lists more locations than the layout has: not repairable automatically")
		case slices.Contains(f.Locations, x.FsID):
			skip(x, "the namespace registers this filesystem for the file now: scan again")
		case damaged:
			skip(x, "the file has damaged registered stripes: repair them first")
		default:
			p.Drop = append(p.Drop, x)
		}
	}
	return p
}

// rebuildable says why stripes rebuild of f cannot be rebuilt from the
// others ("" when they can): bad are the stripes known to be damaged.
func rebuildable(f *File, rebuild []int, bad map[int]bool, all []Finding) string {
	if len(rebuild) == 0 {
		return ""
	}
	l, err := layout.Parse(f.Layout)
	switch {
	case err != nil:
		return "bad layout: " + err.Error()
	case l.Kind == layout.EC:
		sources := 0
		for i := range f.Locations {
			if !slices.Contains(rebuild, i) && !missingStripe(all, f, i) {
				sources++
			}
		}
		if len(rebuild) > l.M || sources < l.K {
			return fmt.Sprintf("unrecoverable: %d of %d stripes to rebuild, %d others readable, layout %s needs %d",
				len(rebuild), len(f.Locations), sources, f.Layout, l.K)
		}
		return ""
	}
	for i := range f.Locations {
		if !bad[i] {
			return ""
		}
	}
	switch {
	case allNS(all):
		return "every copy's metadata disagrees with the namespace: inspect by hand"
	case len(f.Locations) == 1:
		return "the only copy is damaged"
	}
	return "no healthy copy left"
}

// missingStripe reports whether stripe i of f is known to be missing.
func missingStripe(all []Finding, f *File, i int) bool {
	for _, x := range all {
		if x.Class == Missing && x.Stripe == i && x.FsID == f.Locations[i] {
			return true
		}
	}
	return false
}

// allNS reports whether the bad-copy findings in all are only namespace
// disagreements.
func allNS(all []Finding) bool {
	for _, x := range all {
		if x.Class.BadCopy() && x.Class != NSSize && x.Class != NSSum {
			return false
		}
	}
	return true
}

// Stripes is how a rebuild reaches the stripes of one file: wherever they
// are (this storage server or another), and to write the ones to rebuild
// (on this server).
type Stripes interface {
	// Open opens stripe i for reading.
	Open(ctx context.Context, i int) (io.ReaderAt, func(), error)
	// Replace removes stripe i, if it is there, and starts it anew.
	Replace(ctx context.Context, i int) (backend.Writer, error)
}

// Rebuild writes stripes rebuild of f anew from its other stripes.
func Rebuild(ctx context.Context, f *File, rebuild []int, st Stripes) error {
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

func (f *File) meta(i int) backend.Meta {
	return backend.Meta{Fid: f.Fid, Stripe: i, Layout: f.Layout, Size: f.Size, Checksums: f.Checksums, Path: f.Path}
}

// rebuildEC decodes the stripes rebuild from the others, row by row, then
// checks every frame and the parity of the whole file.
func rebuildEC(ctx context.Context, f *File, l erasure.Layout, rebuild []int, st Stripes) (err error) {
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
func replicate(ctx context.Context, f *File, i int, rebuild []int, st Stripes) error {
	var reasons []string
	for j := range f.Locations {
		if slices.Contains(rebuild, j) {
			continue
		}
		_, err := transfer.Copy(ctx, stripeSource{f, j, st}, stripeDest{f, i, st}, transfer.Options{})
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

// stripeSource is replica j of f as a mover source: it vouches for the
// namespace's checksums, so the mover verifies what it copied.
type stripeSource struct {
	f  *File
	j  int
	st Stripes
}

func (s stripeSource) String() string {
	return fmt.Sprintf("stripe %d of %s (fs %d)", s.j, s.f.Path, s.f.Locations[s.j])
}

func (s stripeSource) Open(ctx context.Context) (transfer.Reader, error) {
	r, done, err := s.st.Open(ctx, s.j)
	if err != nil {
		return nil, err
	}
	if sz, ok := r.(interface{ Size() int64 }); ok && sz.Size() != s.f.Size {
		done()
		return nil, kerr.New(kerr.IO, "repair", s.String(), fmt.Sprintf("%d bytes, the file has %d", sz.Size(), s.f.Size))
	}
	return &sourceReader{Reader: io.NewSectionReader(r, 0, s.f.Size), done: done, f: s.f}, nil
}

type sourceReader struct {
	io.Reader
	done func()
	f    *File
}

func (r *sourceReader) Close() error                 { r.done(); return nil }
func (r *sourceReader) Size() int64                  { return r.f.Size }
func (r *sourceReader) Checksums() map[string]string { return r.f.Checksums }

// stripeDest is stripe i of f, written anew, as a mover destination.
type stripeDest struct {
	f  *File
	i  int
	st Stripes
}

func (d stripeDest) String() string {
	return fmt.Sprintf("stripe %d of %s (fs %d)", d.i, d.f.Path, d.f.Locations[d.i])
}

func (d stripeDest) Create(ctx context.Context, size int64) (transfer.Writer, error) {
	if size >= 0 && size != d.f.Size {
		return nil, kerr.New(kerr.IO, "repair", d.String(), fmt.Sprintf("source has %d bytes, the file %d", size, d.f.Size))
	}
	w, err := d.st.Replace(ctx, d.i)
	if err != nil {
		return nil, err
	}
	return &destWriter{w: w, m: d.f.meta(d.i)}, nil
}

type destWriter struct {
	w backend.Writer
	m backend.Meta
}

func (w *destWriter) Write(p []byte) (int, error)  { return w.w.Write(p) }
func (w *destWriter) Commit(context.Context) error { return w.w.Finish(w.m) }
func (w *destWriter) Abort(context.Context)        { w.w.Abort() }
