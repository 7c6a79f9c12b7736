package movement

// Conversions rewrite a file into another layout or space with the same
// mover: `file convert PATH --space S --layout L` for one file, and the
// directory policy sys.convert.space / sys.convert.layout for every file
// below (the nearest directory with a policy decides; like every sys.*
// attribute it is also copied into subdirectories made later).
// A conversion is a staged copy under a new file id (a layout change
// cannot keep the id: physical names are file ids and the new stripes
// may land where old ones are), written by the storage server at its
// first location from the file read whole, checksums compared end to
// end, and switched in under the file's name in one batch only if the
// file was not rewritten or removed meanwhile (namespace.FinishConvert).
// The old stripes are deleted after the capability lifetime.
//
// Policies are applied by a sweep of the namespace when a policy
// attribute is set, when the service starts, and every ConvertSweep.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// ConvertSweep is how often the conversion policies are applied anew
// (besides when one is set and at start).
const ConvertSweep = 5 * time.Minute

// ConvertProgress is where the conversion policies stand.
type ConvertProgress struct {
	LastSweep time.Time // when the last sweep ended
	Pending   int       // files the running sweep still has to convert
	Converted int64     // files converted by policy since start
	Failures  []MoveFailure
	Failed    int64
}

type convertState struct {
	lastSweep time.Time
	pending   int
	converted int64
	fails     failures
}

func (c *convertState) progress() ConvertProgress {
	return ConvertProgress{LastSweep: c.lastSweep, Pending: c.pending, Converted: c.converted, Failures: c.fails.list(), Failed: c.fails.total}
}

// spaceOfFile is the space of the filesystems holding f's stripes: ""
// for a file without stripes, mixedSpaces when they are not all in one
// space (a filesystem moved to another space since).
func (m *Service) spaceOfFile(f *namespace.Inode) string {
	space := ""
	for i, id := range f.Locations {
		fs, _ := m.reg.Filesystem(id)
		if i > 0 && fs.Space != space {
			return mixedSpaces
		}
		space = fs.Space
	}
	return space
}

// mixedSpaces is the space of a file whose stripes are in several (not
// a valid space name, so never the one a conversion asks for).
const mixedSpaces = "(several spaces)"

// Convert converts file f (at path) to layout lay and space ("": keep
// f's); converted is false when there is nothing to move (an empty file
// has no stripes).
func (m *Service) Convert(ctx context.Context, f *namespace.Inode, path, space, lay string) (converted bool, err error) {
	l, sp, err := m.convertTarget(f, space, lay)
	if err != nil {
		return false, kerr.New(kerr.Invalid, "file convert", path, err.Error())
	}
	if (l.String() == f.Layout && sp == m.spaceOfFile(f)) || len(f.Locations) == 0 {
		return false, nil
	}
	if err := m.convertOne(ctx, f, path, l, sp); err != nil {
		m.moved("conversion", 0, 0, false)
		return false, err
	}
	m.count("convert", func(c *MoveCounters) { c.Stripes++; c.Bytes += f.Size })
	m.moved("conversion", 0, f.Size, true)
	return true, nil
}

// ConvertStatus reports the conversion policies' progress.
func (m *Service) ConvertStatus() ConvertProgress {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.convert.progress()
}

// convertTarget resolves the layout and space f converts to ("": f's).
func (m *Service) convertTarget(f *namespace.Inode, space, lay string) (layout.Layout, string, error) {
	if lay == "" {
		lay = f.Layout
	}
	l, err := layout.Parse(lay)
	if err != nil {
		return l, "", err
	}
	if space == "" {
		space = m.spaceOfFile(f)
	}
	if space == mixedSpaces { // where its first stripe is
		fs, _ := m.reg.Filesystem(f.Locations[0])
		space = fs.Space
	}
	if space == "" {
		space = fleet.DefaultSpace
	}
	if !m.reg.SpaceExists(space) {
		return l, "", fmt.Errorf("no space %q", space)
	}
	return l, space, nil
}

// convertOne makes a staged copy of f (at path) with layout l in space
// and switches it in.
func (m *Service) convertOne(ctx context.Context, f *namespace.Inode, path string, l layout.Layout, space string) error {
	if m.mover == nil {
		return kerr.New(kerr.Unsupported, "file convert", path, "this namespace server cannot order conversions")
	}
	locs, err := m.reg.Place(l, space)
	if err != nil {
		return kerr.WithOp(kerr.Wrap(kerr.KindOf(err), "", path, err), "file convert")
	}
	p, err := m.ns.BeginConvert(f.ID, l, locs)
	if err != nil {
		return err
	}
	exp := m.now().Add(moveCapTTL).Unix()
	rc := &capability.Capability{Fid: f.ID, Path: path, Layout: f.Layout, Size: f.Size, Sums: f.Checksums, Expires: exp,
		DataVersion: f.DataVersion, Stale: f.Stale}
	for _, id := range f.Locations {
		rc.Targets = append(rc.Targets, capability.Target{FsID: id, Addr: m.reg.Node(id).HTTP})
	}
	wc := &capability.Capability{Fid: p.ID, Write: true, Staged: true, Path: path, Layout: p.Layout, UID: f.UID, GID: f.GID, Expires: exp}
	for t := range p.Checksums {
		wc.Checksums = append(wc.Checksums, t)
	}
	for _, id := range locs {
		wc.Targets = append(wc.Targets, capability.Target{FsID: id, Addr: m.reg.Node(id).HTTP})
	}
	res, err := m.mover.Convert(ctx, m.reg.Node(locs[0]).HTTP, message.ConvertOrder{Read: m.key.Sign(rc), Write: m.key.Sign(wc)})
	if err != nil {
		if aerr := m.ns.AbortConvert(p.ID); aerr != nil && !kerr.Is(aerr, kerr.NotFound) {
			m.log.Error("convert: cannot drop the staged copy", "path", path, "err", aerr)
		}
		return kerr.Wrap(kerr.KindOf(err), "file convert", path, err)
	}
	return m.ns.FinishConvert(f.ID, p.ID, res.Size, res.Checksums, m.now().Add(m.ttl))
}

// Policy attributes: a directory's files are converted to these.
const (
	AttrConvertLayout = nsapi.AttrConvertLayout
	AttrConvertSpace  = nsapi.AttrConvertSpace
)

// runPolicies applies the conversion policies at start, when one is set
// and every ConvertSweep, until ctx ends.
func (m *Service) runPolicies(ctx context.Context) {
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-t.C:
		}
		m.sweepPolicies(ctx)
		t.Reset(ConvertSweep)
	}
}

// KickPolicies asks for a sweep of the conversion policies soon (one was
// set).
func (m *Service) KickPolicies() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

type policy struct{ layout, space string }

// sweepPolicies converts every file whose directory has a conversion
// policy it does not follow yet.
func (m *Service) sweepPolicies(ctx context.Context) {
	type job struct {
		f *namespace.Inode
		l layout.Layout
		s string
	}
	var todo []job
	// The policy of a directory is that of the nearest directory at or
	// above it with one (set later than its subdirectories were made,
	// it is not copied into them).
	// Files in the recycle bin (a container that is its own parent, not
	// below the root) are left alone whatever their old directory said.
	type found struct {
		pol    policy
		inTree bool // the chain of parents reaches the root
	}
	memo := map[uint64]found{}
	var policyOf func(cid uint64) found
	policyOf = func(cid uint64) found {
		if f, ok := memo[cid]; ok {
			return f
		}
		var f found
		if d, err := m.ns.GetAttr(namespace.Root, cid); err == nil {
			switch {
			case cid == namespace.RootID:
				f.inTree = true
			case d.Parent != d.ID:
				f = policyOf(d.Parent)
			}
			if own := (policy{layout: d.XAttrs[AttrConvertLayout], space: d.XAttrs[AttrConvertSpace]}); own != (policy{}) {
				f.pol = own
			}
		}
		memo[cid] = f
		return f
	}
	err := m.eachFile(func(f *namespace.Inode) {
		found := policyOf(f.Parent)
		pol := found.pol
		if !found.inTree || pol == (policy{}) || len(f.Locations) == 0 {
			return
		}
		l, sp, err := m.convertTarget(f, pol.space, pol.layout)
		if err != nil || (l.String() == f.Layout && sp == m.spaceOfFile(f)) {
			return
		}
		todo = append(todo, job{f, l, sp})
	})
	if err != nil {
		m.log.Error("conversion policies: cannot scan the namespace", "err", err)
		return
	}
	m.mu.Lock()
	m.convert.pending = len(todo)
	m.mu.Unlock()
	for _, j := range todo {
		if ctx.Err() != nil {
			return
		}
		path := m.pathOfID(j.f.ID)
		err := m.convertOne(ctx, j.f, path, j.l, j.s)
		m.mu.Lock()
		m.convert.pending--
		switch {
		case err == nil:
			m.convert.converted++
			m.convert.fails.clear(j.f.ID, -1)
			m.counters["convert"].Stripes++
			m.counters["convert"].Bytes += j.f.Size
		case kerr.Is(err, kerr.NotFound):
			m.counters["convert"].Dropped++ // removed or rewritten meanwhile
		default:
			m.convert.fails.add(MoveFailure{Path: path, Fid: j.f.ID, Stripe: -1, Reason: err.Error(), Time: time.Now()})
			m.counters["convert"].Failures++
		}
		m.mu.Unlock()
		m.moved("conversion", 0, j.f.Size, err == nil)
		if err != nil && !kerr.Is(err, kerr.NotFound) {
			m.log.Warn("conversion policy: file not converted", "path", path, "to", j.l.String()+" in "+j.s, "err", err)
		}
	}
	m.mu.Lock()
	m.convert.lastSweep = time.Now()
	m.mu.Unlock()
}

// IsConvertAttr says whether an attribute name is a conversion policy.
func IsConvertAttr(name string) bool { return strings.HasPrefix(name, "sys.convert.") }
