package nsserver

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/fsck"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// fsck in the namespace service (package fsck has the logic). Storage
// servers send what their scans find in batches (FsckScan); each stripe is
// compared with the namespace and the findings kept in a book. A completed
// scan is its filesystem's inventory; after scans complete, a pass over
// every file of the namespace finds registered stripes that are missing.
// Operators see the findings (FsckStat, FsckReport), ask for scans
// (FsckRun) and repairs (FsckRepair: stripes rebuilt by the storage server
// holding them, orphans and unregistered copies queued for deletion).

// Repairer asks a storage server to rebuild stripes
// (cluster.StorageClient over the internal protocol).
type Repairer interface {
	Repair(ctx context.Context, addr string, job message.RepairJob) error
}

// Defaults of the namespace side of fsck.
const (
	DefaultFsckRate    = 10000          // files per second of the namespace pass
	DefaultOrphanGrace = 24 * time.Hour // orphans are dropped only once found this long ago
)

// repairCapTTL is the lifetime of a repair's read capability.
const repairCapTTL = 6 * time.Hour

// scanGone is how long a scan may send nothing before it counts as
// abandoned (its storage server died).
const scanGone = 5 * time.Minute

type fsckState struct {
	book *fsck.Book
	wake chan struct{} // a scan completed

	mu        sync.Mutex
	fs        map[uint32]*fsScan
	runSeq    int64
	pass      PassStatus
	repairs   map[string]int64 // "class/result" -> count
	checked   int64            // stripes compared since start
	repairing map[uint64]bool  // files a repair works on now
}

// fsScan is the scan state of one filesystem.
type fsScan struct {
	cur       time.Time // start of the scan in progress (zero: none)
	curScrub  bool
	curFids   []uint64
	lastBatch time.Time
	seen      int64
	total     int64
	bytes     int64

	inv       *fsck.Inventory
	lastStart time.Time
	lastEnd   time.Time
	lastSeen  int64
	lastScrub time.Time
	lastErr   string

	req      int64 // a scan requested and not yet completed (0: none)
	reqScrub bool
}

func newFsckState() *fsckState {
	return &fsckState{book: fsck.NewBook(), wake: make(chan struct{}, 1), fs: map[uint32]*fsScan{}, repairs: map[string]int64{},
		repairing: map[uint64]bool{}}
}

func (st *fsckState) scanOf(id uint32) *fsScan {
	f := st.fs[id]
	if f == nil {
		f = &fsScan{}
		st.fs[id] = f
	}
	return f
}

var (
	_ message.Fsck      = (*Server)(nil)
	_ message.Leftovers = (*Server)(nil)
)

// Unfinished answers a restarted storage server about the stripes it
// found without metadata on one of its filesystems (being written when
// it stopped): those whose id is no file's, no pending upload's or
// copy's, and which no move into that filesystem is writing are unknown
// here, and nothing else would remove them before fsck's orphan grace.
// Any other is kept: a committed file's stripe (its metadata damaged is
// fsck's business), one of an upload still pending (removed through the
// deletion queue when the upload ends without a commit), a move's copy.
func (s *Server) Unfinished(_ context.Context, u message.Unfinished) (message.UnfinishedReply, error) {
	what := fmt.Sprintf("fs %d", u.FsID)
	switch reg, ok := s.reg.filesystem(u.FsID); {
	case !ok:
		return message.UnfinishedReply{}, kerr.New(kerr.NotFound, "unfinished stripes", what, "no such filesystem")
	case reg.Node != u.Node:
		return message.UnfinishedReply{}, kerr.New(kerr.Invalid, "unfinished stripes", what,
			fmt.Sprintf("reported by node %s, registered on node %s", u.Node, reg.Node))
	}
	states, err := s.ns.LookupFids(u.Fids)
	if err != nil {
		return message.UnfinishedReply{}, err
	}
	var r message.UnfinishedReply
	for i, st := range states {
		if st.File != nil || st.Pending {
			continue
		}
		moving, err := s.ns.MoveInFlight(u.FsID, u.Fids[i])
		if err != nil {
			return message.UnfinishedReply{}, err
		}
		if !moving {
			r.Unknown = append(r.Unknown, u.Fids[i])
		}
	}
	return r, nil
}

// FsckScan implements message.Fsck: one batch of a storage server's scan.
func (s *Server) FsckScan(_ context.Context, m message.FsckScan) error {
	reg, ok := s.reg.filesystem(m.FsID)
	switch {
	case !ok:
		return kerr.New(kerr.NotFound, "fsck", fmt.Sprintf("fs %d", m.FsID), "no such filesystem")
	case reg.Node != m.Node:
		return kerr.New(kerr.Invalid, "fsck", fmt.Sprintf("fs %d", m.FsID),
			fmt.Sprintf("scanned by node %s, registered on node %s", m.Node, reg.Node))
	}
	now := s.now()
	gen := m.Start.UnixNano()
	fids := make([]uint64, len(m.Stripes))
	for i, st := range m.Stripes {
		fids[i] = st.Fid
	}
	states, err := s.ns.LookupFids(fids)
	if err != nil {
		return err
	}
	var found []fsck.Finding
	for i, st := range m.Stripes {
		l := fsck.Lookup{Pending: states[i].Pending}
		if n := states[i].File; n != nil {
			l.File = fileOf(n, "")
		}
		if l.File == nil || !slices.Contains(l.File.Locations, m.FsID) {
			if l.Queued, err = s.ns.DeletionQueued(m.FsID, st.Fid, st.Stripe); err != nil {
				return err
			}
			// A stripe a move is writing here is registered or queued
			// for deletion when the move ends (mover.go).
			if !l.Queued {
				if l.Queued, err = s.ns.MoveInFlight(m.FsID, st.Fid); err != nil {
					return err
				}
			}
		}
		fs := fsck.CheckStripe(m.FsID, st, l)
		for j := range fs {
			if n := states[i].File; n != nil {
				if p, err := s.ns.PathOf(n); err == nil {
					fs[j].Path = p
				}
			}
			fs[j].Phys = s.physOf(fs[j].FsID, st.Fid)
		}
		found = append(found, fs...)
	}
	s.fsck.book.Note(found, gen, false, now)

	st := s.fsck
	st.mu.Lock()
	defer st.mu.Unlock()
	st.checked += int64(len(m.Stripes))
	f := st.scanOf(m.FsID)
	if !f.cur.Equal(m.Start) {
		f.cur, f.curScrub, f.curFids = m.Start, m.Scrub, nil
	}
	f.curFids = append(f.curFids, fids...)
	f.lastBatch, f.seen, f.total, f.bytes = now, m.Seen, m.Total, m.Bytes
	switch {
	case m.Done:
		inv := fsck.NewInventory(m.Start, f.curFids)
		s.fsck.book.ScanDone(m.FsID, gen, m.Scrub, inv)
		f.inv, f.lastStart, f.lastEnd, f.lastSeen, f.lastErr = inv, m.Start, now, m.Seen, ""
		if m.Scrub {
			f.lastScrub = m.Start
		}
		if m.Run != 0 && m.Run >= f.req {
			f.req, f.reqScrub = 0, false
		}
		f.cur, f.curFids = time.Time{}, nil
		select {
		case st.wake <- struct{}{}:
		default:
		}
	case m.Failed != "":
		f.lastErr, f.cur, f.curFids = m.Failed, time.Time{}, nil
	}
	return nil
}

// fileOf is n as fsck compares it.
func fileOf(n *namespace.Inode, path string) *fsck.File {
	return &fsck.File{Fid: n.ID, Path: path, Layout: n.Layout, Size: n.Size, Checksums: n.Checksums,
		Locations: n.Locations, Changed: time.Unix(0, n.CTime)}
}

// physOf names the physical file of fid on fsid ("" when unknown).
func (s *Server) physOf(fsid uint32, fid uint64) string {
	if fsid == 0 || s.phys == nil {
		return ""
	}
	if fs, ok := s.reg.filesystem(fsid); ok {
		return s.phys(fs, fid)
	}
	return ""
}

// fsckAssign adds each filesystem's scan settings (and a pending scan
// request) to its assignment.
func (s *Server) fsckAssign(as []message.FsAssignment) {
	st := s.fsck
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range as {
		set := message.FsckSettings{}
		if fs, ok := s.reg.filesystem(as[i].ID); ok {
			set = fsckSettings(fs.Fsck)
		}
		set = fsck.Resolve(set)
		if f := st.fs[as[i].ID]; f != nil && f.req != 0 {
			set.Run, set.RunScrub = f.req, f.reqScrub
		}
		as[i].Fsck = &set
	}
}

func fsckSettings(f namespace.FsckSettings) message.FsckSettings {
	return message.FsckSettings{DiskInterval: f.DiskInterval, NSRate: f.NSRate, ScrubInterval: f.ScrubInterval, ScrubRate: f.ScrubRate}
}

// configFsck applies an fsck key of `fs config` to c; handled is false for
// other keys.
func configFsck(c *namespace.Filesystem, key, value string) (handled bool, err error) {
	if !slices.Contains(fsck.Keys, key) {
		return false, nil
	}
	set := fsckSettings(c.Fsck)
	if err := fsck.Set(&set, key, value); err != nil {
		return true, err
	}
	c.Fsck = namespace.FsckSettings{DiskInterval: set.DiskInterval, NSRate: set.NSRate, ScrubInterval: set.ScrubInterval, ScrubRate: set.ScrubRate}
	return true, nil
}

// fsckLoop runs the namespace pass after scans complete, until ctx ends.
func (s *Server) fsckLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.fsck.wake:
		}
		if s.passDue() {
			if err := s.fsckPass(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("fsck namespace pass failed", "err", err)
			}
		}
	}
}

// passDue says whether a scan completed since the last pass started and
// no other scan is still running (or the newest completed long ago).
func (s *Server) passDue() bool {
	st := s.fsck
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.now()
	var newest time.Time
	running := false
	for _, f := range st.fs {
		if f.lastEnd.After(newest) {
			newest = f.lastEnd
		}
		if f.req != 0 || (!f.cur.IsZero() && now.Sub(f.lastBatch) < scanGone) {
			running = true // a scan is requested or in progress
		}
	}
	return newest.After(st.pass.LastStart) && (!running || now.Sub(newest) > scanGone)
}

// fsckPass checks every file's registered stripes against the
// inventories of the completed scans (missing stripes) and its number
// of locations against its layout.
func (s *Server) fsckPass(ctx context.Context) error {
	st := s.fsck
	start := s.now()
	invs := map[uint32]*fsck.Inventory{}
	st.mu.Lock()
	st.pass.Running, st.pass.LastStart = true, start
	for id, f := range st.fs {
		if f.inv != nil {
			invs[id] = f.inv
		}
	}
	st.mu.Unlock()
	gen := start.UnixNano()
	inv := func(id uint32) *fsck.Inventory { return invs[id] }
	rate := s.cfg.FsckRate
	if rate == 0 {
		rate = DefaultFsckRate
	}
	var files int64
	var from []byte
	var err error
	for {
		var batch []*namespace.Inode
		from, err = s.ns.ScanFiles(from, 1000, func(n *namespace.Inode) {
			files++
			if len(n.Locations) > 0 {
				batch = append(batch, n)
			}
		})
		if err != nil {
			break
		}
		var found []fsck.Finding
		for _, n := range batch {
			fs := fsck.CheckFile(fileOf(n, ""), inv)
			if len(fs) == 0 {
				continue
			}
			p, _ := s.ns.PathOf(n)
			for j := range fs {
				fs[j].Path, fs[j].Phys = p, s.physOf(fs[j].FsID, n.ID)
			}
			found = append(found, fs...)
		}
		s.fsck.book.Note(found, gen, true, s.now())
		st.mu.Lock()
		st.pass.Files = files
		st.mu.Unlock()
		if from == nil || ctx.Err() != nil {
			break
		}
		if rate > 0 {
			d := time.Until(start.Add(time.Duration(float64(files) / float64(rate) * float64(time.Second))))
			if d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
		}
	}
	if err == nil && ctx.Err() == nil {
		s.fsck.book.PassDone(gen)
	}
	st.mu.Lock()
	st.pass.Running, st.pass.LastEnd, st.pass.Files = false, s.now(), files
	if err != nil {
		st.pass.LastErr = err.Error()
	} else {
		st.pass.LastErr = ""
	}
	st.mu.Unlock()
	s.log.Info("fsck namespace pass done", "files", files, "took", s.now().Sub(start).Round(time.Millisecond))
	return err
}

// FsckStatus is the state of fsck (`fsck stat`).
type FsckStatus struct {
	Counts      map[fsck.Class]int
	Filesystems []FsckFsStatus
	Pass        PassStatus
	OrphanGrace time.Duration
	Checked     int64 // stripes compared since the server started
}

// FsckFsStatus is the scan state of one filesystem.
type FsckFsStatus struct {
	FsID      uint32
	Node      string
	Path      string
	Settings  string // as `fs config` sets them
	Requested bool   // a scan was asked for and has not completed yet
	Scanning  bool
	Scrubbing bool
	Seen      int64 // stripes walked by the scan running
	Total     int64 // stripes its filesystem held when it started
	Bytes     int64 // bytes it re-read
	LastStart time.Time
	LastEnd   time.Time
	LastSeen  int64
	LastScrub time.Time
	LastError string
}

// PassStatus is the state of the namespace pass.
type PassStatus struct {
	Running   bool
	LastStart time.Time
	LastEnd   time.Time
	Files     int64
	LastErr   string
}

// FsckStat reports the findings per class and the scans.
func (s *Server) FsckStat(_ context.Context, p auth.Principal) (FsckStatus, error) {
	if err := requireRoot(p, "fsck stat"); err != nil {
		return FsckStatus{}, err
	}
	out := FsckStatus{Counts: s.fsck.book.Counts(), OrphanGrace: s.orphanGrace()}
	st := s.fsck
	now := s.now()
	regs := s.reg.list()
	st.mu.Lock()
	defer st.mu.Unlock()
	out.Pass, out.Checked = st.pass, st.checked
	for _, r := range regs {
		fs := FsckFsStatus{FsID: r.ID, Node: r.Node, Path: r.Path, Settings: fsck.Describe(fsckSettings(r.Fsck))}
		if f := st.fs[r.ID]; f != nil {
			fs.Requested = f.req != 0
			fs.Scanning = !f.cur.IsZero() && now.Sub(f.lastBatch) < scanGone
			if fs.Scanning {
				fs.Scrubbing, fs.Seen, fs.Total, fs.Bytes = f.curScrub, f.seen, f.total, f.bytes
			}
			fs.LastStart, fs.LastEnd, fs.LastSeen, fs.LastScrub, fs.LastError = f.lastStart, f.lastEnd, f.lastSeen, f.lastScrub, f.lastErr
		}
		out.Filesystems = append(out.Filesystems, fs)
	}
	return out, nil
}

// FsckReport lists the findings of class (all with ""), of filesystem
// fsid (all with 0).
func (s *Server) FsckReport(_ context.Context, p auth.Principal, class string, fsid uint32) ([]fsck.Finding, error) {
	if err := requireRoot(p, "fsck report"); err != nil {
		return nil, err
	}
	var c fsck.Class
	if class != "" {
		var err error
		if c, err = fsck.ParseClass(class); err != nil {
			return nil, kerr.New(kerr.Invalid, "fsck report", class, err.Error())
		}
	}
	return s.fsck.book.List(func(f *fsck.Finding) bool {
		return (c == "" || f.Class == c) && (fsid == 0 || f.FsID == fsid)
	}), nil
}

// FsckRun asks the storage servers to scan filesystem fsid (every
// registered one with 0) now; scrub makes the scans re-read the data.
func (s *Server) FsckRun(ctx context.Context, p auth.Principal, fsid uint32, scrub bool) (err error) {
	what := "all filesystems"
	if fsid != 0 {
		what = fmt.Sprintf("fs %d", fsid)
	}
	defer func() { err = s.audit(ctx, p, "fsck run", what, "", err) }()
	if err := requireRoot(p, "fsck run"); err != nil {
		return err
	}
	var ids []uint32
	for _, f := range s.reg.list() {
		if (fsid == 0 && f.BootStatus == "booted") || f.ID == fsid {
			ids = append(ids, f.ID)
		}
	}
	if fsid != 0 && len(ids) == 0 {
		return kerr.New(kerr.NotFound, "fsck run", what, "no such filesystem")
	}
	st := s.fsck
	st.mu.Lock()
	defer st.mu.Unlock()
	// Request ids grow across restarts (storage servers remember the
	// last one they started).
	st.runSeq = max(st.runSeq+1, s.now().UnixNano())
	for _, id := range ids {
		f := st.scanOf(id)
		f.req, f.reqScrub = st.runSeq, f.reqScrub || scrub
	}
	return nil
}

// RepairOutcome is what a repair did about one finding.
type RepairOutcome struct {
	fsck.Finding
	Result string // repaired, dropped, skipped, failed
	Why    string
}

func (s *Server) orphanGrace() time.Duration {
	switch {
	case s.cfg.FsckOrphanGrace < 0:
		return 0
	case s.cfg.FsckOrphanGrace == 0:
		return DefaultOrphanGrace
	}
	return s.cfg.FsckOrphanGrace
}

// FsckRepair repairs what is repairable of the findings of class ("all":
// every class, in priority order) on filesystem fsid (all with 0):
// stripes are rebuilt in place from the file's healthy ones, orphans older
// than the grace time and copies no file registers are queued for
// deletion. It returns when every repair has ended.
func (s *Server) FsckRepair(ctx context.Context, p auth.Principal, class string, fsid uint32) (out []RepairOutcome, err error) {
	defer func() { err = s.audit(ctx, p, "fsck repair", class, "", err) }()
	if err := requireRoot(p, "fsck repair"); err != nil {
		return nil, err
	}
	classes := fsck.Classes
	if class != "all" {
		c, err := fsck.ParseClass(class)
		if err != nil {
			return nil, kerr.New(kerr.Invalid, "fsck repair", class, err.Error()+" or all")
		}
		classes = []fsck.Class{c}
	}
	todo := s.fsck.book.List(func(f *fsck.Finding) bool {
		return slices.Contains(classes, f.Class) && (fsid == 0 || f.FsID == fsid || f.FsID == 0)
	})
	byFid := map[uint64][]fsck.Finding{}
	var fids []uint64
	for _, f := range todo {
		if byFid[f.Fid] == nil {
			fids = append(fids, f.Fid)
		}
		byFid[f.Fid] = append(byFid[f.Fid], f)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, fid := range fids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res := s.repairFile(ctx, fid, byFid[fid])
			mu.Lock()
			out = append(out, res...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	st := s.fsck
	st.mu.Lock()
	for _, o := range out {
		st.repairs[string(o.Class)+"/"+o.Result]++
	}
	st.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Class < out[j].Class
	})
	return out, nil
}

// repairFile repairs the findings todo of one file: stripes are rebuilt
// first, then copies dropped.
func (s *Server) repairFile(ctx context.Context, fid uint64, todo []fsck.Finding) []RepairOutcome {
	var out []RepairOutcome
	note := func(f fsck.Finding, result, why string) { out = append(out, RepairOutcome{f, result, why}) }
	st := s.fsck
	st.mu.Lock()
	busy := st.repairing[fid]
	st.repairing[fid] = true
	st.mu.Unlock()
	if busy {
		for _, f := range todo {
			note(f, "skipped", "another repair of this file is running")
		}
		return out
	}
	defer func() {
		st.mu.Lock()
		delete(st.repairing, fid)
		st.mu.Unlock()
	}()
	states, err := s.ns.LookupFids([]uint64{fid})
	if err != nil {
		for _, f := range todo {
			note(f, "failed", err.Error())
		}
		return out
	}
	var file *fsck.File
	if n := states[0].File; n != nil {
		path, _ := s.ns.PathOf(n)
		file = fileOf(n, path)
	}
	plan := fsck.PlanRepair(file, todo, s.fsck.book.ForFile(fid), s.orphanGrace(), s.now())
	for _, x := range plan.Skip {
		note(x.Finding, "skipped", x.Why)
	}
	rebuilt := true
	if len(plan.Rebuild) > 0 {
		var res []RepairOutcome
		res, rebuilt = s.rebuild(ctx, file, plan.Rebuild, todo)
		out = append(out, res...)
	}
	// Copies to drop, checked once more against the namespace now.
	var drops []namespace.Deletion
	var dropped []fsck.Finding
	for _, f := range plan.Drop {
		switch {
		case states[0].Pending:
			note(f, "skipped", "an upload with this fid is in progress")
		case !rebuilt && f.Class != fsck.Orphan:
			note(f, "skipped", "the file's damaged stripes could not all be rebuilt: it may need this copy")
		default:
			drops = append(drops, namespace.Deletion{FsID: f.FsID, Fid: f.Fid, Stripe: f.Stripe})
			dropped = append(dropped, f)
		}
	}
	if len(drops) == 0 {
		return out
	}
	if err := s.ns.QueueDeletions(drops); err != nil {
		for _, f := range dropped {
			note(f, "failed", err.Error())
		}
		return out
	}
	for _, f := range dropped {
		note(f, "dropped", "queued for deletion by its storage server")
		s.fsck.book.Drop(f.Key())
		if f.Class != fsck.Orphan {
			s.fsck.book.Drop(fsck.Key{Class: fsck.Unreg, Fid: f.Fid, FsID: f.FsID, Stripe: f.Stripe})
			s.fsck.book.Drop(fsck.Key{Class: fsck.ReplicaDiff, Fid: f.Fid, FsID: f.FsID, Stripe: f.Stripe})
		}
	}
	return out
}

// rebuild has the storage servers holding stripes idx of file rebuild
// them (one job per server) and reports per finding; ok is false unless
// every stripe was rebuilt.
func (s *Server) rebuild(ctx context.Context, file *fsck.File, idx []int, todo []fsck.Finding) (out []RepairOutcome, ok bool) {
	note := func(f fsck.Finding, result, why string) { out = append(out, RepairOutcome{f, result, why}) }
	about := func(i int) []fsck.Finding {
		var fs []fsck.Finding
		for _, f := range todo {
			if f.Stripe == i && f.FsID == file.Locations[i] && f.Class.BadCopy() {
				fs = append(fs, f)
			}
		}
		return fs
	}
	ok = true
	byNode := map[string][]int{}
	for _, i := range idx {
		fsid := file.Locations[i]
		node, up := s.reg.readable(fsid)
		switch {
		case !up || node.HTTP == "":
			for _, f := range about(i) {
				note(f, "skipped", fmt.Sprintf("fs %d is not available (down, offline or off): drain it or bring it back", fsid))
			}
			ok = false
		case s.repairer == nil:
			for _, f := range about(i) {
				note(f, "failed", "this namespace server cannot reach storage servers for repairs")
			}
			ok = false
		default:
			byNode[node.HTTP] = append(byNode[node.HTTP], i)
		}
	}
	if len(byNode) == 0 {
		return out, ok
	}
	// The capability goes to storage servers only, and must outlive the
	// copy of a large file.
	c := &capability.Capability{Fid: file.Fid, Path: file.Path, Layout: file.Layout, Size: file.Size, Sums: file.Checksums,
		Expires: s.now().Add(max(s.ttl, repairCapTTL)).Unix()}
	for _, fsid := range file.Locations {
		c.Targets = append(c.Targets, capability.Target{FsID: fsid, Addr: s.reg.node(fsid).HTTP})
	}
	token := s.key.Sign(c)
	for addr, on := range byNode {
		err := s.repairer.Repair(ctx, addr, message.RepairJob{Fid: file.Fid, Token: token, Rebuild: on})
		for _, i := range on {
			for _, f := range about(i) {
				if err != nil {
					note(f, "failed", err.Error())
				} else {
					note(f, "repaired", fmt.Sprintf("stripe %d rebuilt on fs %d", i, f.FsID))
				}
			}
			if err == nil {
				s.fsck.book.DropStripe(file.Fid, file.Locations[i], i)
				s.fsck.inventoryAdd(file.Locations[i], file.Fid)
			}
		}
		if err != nil {
			ok = false
			s.log.Warn("fsck repair failed", "path", file.Path, "fid", file.Fid, "stripes", on, "node", addr, "err", err)
		} else {
			s.log.Info("fsck repaired", "path", file.Path, "fid", file.Fid, "stripes", on, "node", addr)
		}
	}
	return out, ok
}

// inventoryAdd records that fid is on fsid now (a rebuilt stripe), so
// the next pass does not find it missing.
func (st *fsckState) inventoryAdd(fsid uint32, fid uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if f := st.fs[fsid]; f != nil && f.inv != nil {
		f.inv.Add(fid)
	}
}

// FsckCounters are fsck's counters for metrics.
type FsckCounters struct {
	Findings  map[fsck.Class]int
	Checked   int64              // stripes compared
	Repairs   map[string]int64   // "class/result"
	Scanning  map[uint32]float64 // filesystems being scanned: fraction done
	PassFiles int64
}

// FsckCounters returns fsck's counters (no authorization: for metrics).
func (s *Server) FsckCounters() FsckCounters {
	out := FsckCounters{Findings: s.fsck.book.Counts(), Repairs: map[string]int64{}, Scanning: map[uint32]float64{}}
	st := s.fsck
	now := s.now()
	st.mu.Lock()
	defer st.mu.Unlock()
	out.Checked, out.PassFiles = st.checked, st.pass.Files
	for k, v := range st.repairs {
		out.Repairs[k] = v
	}
	for id, f := range st.fs {
		if !f.cur.IsZero() && now.Sub(f.lastBatch) < scanGone {
			frac := 0.0
			if f.total > 0 {
				frac = min(1, float64(f.seen)/float64(f.total))
			}
			out.Scanning[id] = frac
		}
	}
	return out
}
