package fsck

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// The service: fsck in the namespace server (EOS: the MGM's Fsck). Storage
// servers send what their scans find in batches (Scan); each stripe is
// compared with the namespace and the findings kept in a book. A completed
// scan is its filesystem's inventory; after scans complete, a pass over
// every file of the namespace finds registered stripes that are missing.
// Operators see the findings (Stat, Report), ask for scans (Request) and
// repairs (Repair: stripes rebuilt by the storage server holding them,
// orphans and unregistered copies queued for deletion). The service sees
// the namespace through Namespace, the storage servers through Repairer
// and the filesystems through the fleet's registry, where it registers
// its keys of `fs config` (the scan settings).

// Namespace is what fsck needs of the namespace (namespace.Namespace
// implements it).
type Namespace interface {
	LookupFids(fids []uint64) ([]namespace.FidState, error)
	DeletionQueued(fsid uint32, fid uint64, idx int) (bool, error)
	MoveInFlight(fsid uint32, fid uint64) (bool, error)
	PathOf(n *namespace.Inode) (string, error)
	ScanFiles(from []byte, max int, fn func(f *namespace.Inode)) (next []byte, err error)
	QueueDeletions(ds []namespace.Deletion) error
	// ClearStale records that a stale stripe was rebuilt at the file's
	// data version.
	ClearStale(fid, version uint64, idx int) error
}

// Config configures the service.
type Config struct {
	NS    Namespace
	Fleet *fleet.Registry
	// Repairer reaches storage servers for repairs; nil: none.
	Repairer Repairer
	Key      *capability.Key // signs the repairs' read capabilities
	TTL      time.Duration   // capability lifetime (a repair's lasts at least repairCapTTL)
	// Rate is the namespace pass's pace in files per second (0:
	// DefaultFsckRate, negative: unthrottled); OrphanGrace how long ago an
	// orphan must have been found before a repair drops it (0:
	// DefaultOrphanGrace, negative: none).
	Rate        int
	OrphanGrace time.Duration
	// PhysName names stripe fid on filesystem fs as its backend stores it
	// (in findings); nil: not shown.
	PhysName func(fs namespace.Filesystem, fid uint64) string
	Now      func() time.Time
	Log      *slog.Logger
}

// Service is fsck in the namespace server. It is safe for concurrent use.
type Service struct {
	ns       Namespace
	reg      *fleet.Registry
	repairer Repairer
	key      *capability.Key
	ttl      time.Duration
	rate     int
	grace    time.Duration
	phys     func(fs namespace.Filesystem, fid uint64) string
	now      func() time.Time
	log      *slog.Logger
	st       *fsckState
}

// NewService makes the service and registers its keys with the fleet.
func NewService(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Service{ns: cfg.NS, reg: cfg.Fleet, repairer: cfg.Repairer, key: cfg.Key, ttl: cfg.TTL, rate: cfg.Rate, grace: cfg.OrphanGrace,
		phys: cfg.PhysName, now: cfg.Now, log: cfg.Log, st: newFsckState()}
	cfg.Fleet.RegisterKeys(fsKeys()...)
	return s
}

// Repairer asks a storage server to rebuild stripes
// (cluster.StorageClient over the internal protocol).
type Repairer interface {
	Repair(ctx context.Context, addr string, job message.RepairJob) error
}

// Defaults of the namespace side of
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
	book *Book
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

	inv       *Inventory
	lastStart time.Time
	lastEnd   time.Time
	lastSeen  int64
	lastScrub time.Time
	lastErr   string

	req      int64 // a scan requested and not yet completed (0: none)
	reqScrub bool
}

func newFsckState() *fsckState {
	return &fsckState{book: NewBook(), wake: make(chan struct{}, 1), fs: map[uint32]*fsScan{}, repairs: map[string]int64{},
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

// Scan takes one batch of a storage server's scan (message.Fsck).
func (s *Service) Scan(_ context.Context, m message.FsckScan) error {
	reg, ok := s.reg.Filesystem(m.FsID)
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
	var found []Finding
	for i, st := range m.Stripes {
		l := Lookup{Pending: states[i].Pending}
		if n := states[i].File; n != nil {
			l.File = fileOf(n, "")
		}
		if l.File == nil || !slices.Contains(l.File.Locations, m.FsID) {
			if l.Queued, err = s.ns.DeletionQueued(m.FsID, st.Fid, st.Stripe); err != nil {
				return err
			}
			// A stripe a move is writing here is registered or queued
			// for deletion when the move ends (package movement).
			if !l.Queued {
				if l.Queued, err = s.ns.MoveInFlight(m.FsID, st.Fid); err != nil {
					return err
				}
			}
		}
		fs := CheckStripe(m.FsID, st, l)
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
	s.st.book.Note(found, gen, false, now)

	st := s.st
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
		inv := NewInventory(m.Start, f.curFids)
		s.st.book.ScanDone(m.FsID, gen, m.Scrub, inv)
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
func fileOf(n *namespace.Inode, path string) *File {
	return &File{Fid: n.ID, Path: path, Layout: n.Layout, Size: n.Size, Checksums: n.Checksums,
		Locations: n.Locations, Changed: time.Unix(0, n.CTime), DataVersion: n.DataVersion, Stale: n.Stale}
}

// physOf names the physical file of fid on fsid ("" when unknown).
func (s *Service) physOf(fsid uint32, fid uint64) string {
	if fsid == 0 || s.phys == nil {
		return ""
	}
	if fs, ok := s.reg.Filesystem(fsid); ok {
		return s.phys(fs, fid)
	}
	return ""
}

// Assign adds each filesystem's scan settings (and a pending scan
// request) to its assignment.
func (s *Service) Assign(as []message.FsAssignment) {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range as {
		set := message.FsckSettings{}
		if fs, ok := s.reg.Filesystem(as[i].ID); ok {
			set = fsckSettings(fs.Fsck)
		}
		set = set.Resolved()
		if f := st.fs[as[i].ID]; f != nil && f.req != 0 {
			set.Run, set.RunScrub = f.req, f.reqScrub
		}
		as[i].Fsck = &set
	}
}

func fsckSettings(f namespace.FsckSettings) message.FsckSettings {
	return message.FsckSettings{DiskInterval: f.DiskInterval, NSRate: f.NSRate, ScrubInterval: f.ScrubInterval, ScrubRate: f.ScrubRate}
}

// fsKeys are fsck's keys of `fs config`: the scan settings.
func fsKeys() []fleet.FsKey {
	var out []fleet.FsKey
	for _, k := range Keys {
		out = append(out, fleet.FsKey{Name: k, Set: func(c *namespace.Filesystem, v string) error {
			set := fsckSettings(c.Fsck)
			if err := Set(&set, k, v); err != nil {
				return err
			}
			c.Fsck = namespace.FsckSettings{DiskInterval: set.DiskInterval, NSRate: set.NSRate, ScrubInterval: set.ScrubInterval, ScrubRate: set.ScrubRate}
			return nil
		}})
	}
	return out
}

// Run runs the namespace pass after scans complete, until ctx ends.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.st.wake:
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
func (s *Service) passDue() bool {
	st := s.st
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
func (s *Service) fsckPass(ctx context.Context) error {
	st := s.st
	start := s.now()
	invs := map[uint32]*Inventory{}
	st.mu.Lock()
	st.pass.Running, st.pass.LastStart = true, start
	for id, f := range st.fs {
		if f.inv != nil {
			invs[id] = f.inv
		}
	}
	st.mu.Unlock()
	gen := start.UnixNano()
	inv := func(id uint32) *Inventory { return invs[id] }
	rate := s.rate
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
		var found []Finding
		for _, n := range batch {
			fs := CheckFile(fileOf(n, ""), inv)
			if len(fs) == 0 {
				continue
			}
			p, _ := s.ns.PathOf(n)
			for j := range fs {
				fs[j].Path, fs[j].Phys = p, s.physOf(fs[j].FsID, n.ID)
			}
			found = append(found, fs...)
		}
		s.st.book.Note(found, gen, true, s.now())
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
		s.st.book.PassDone(gen)
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

// Status is the state of fsck (`fsck stat`).
type Status struct {
	Counts      map[Class]int
	Filesystems []FsStatus
	Pass        PassStatus
	OrphanGrace time.Duration
	Checked     int64 // stripes compared since the server started
}

// FsStatus is the scan state of one filesystem.
type FsStatus struct {
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

// Stat reports the findings per class and the scans.
func (s *Service) Stat() Status {
	out := Status{Counts: s.st.book.Counts(), OrphanGrace: s.orphanGrace()}
	st := s.st
	now := s.now()
	regs := s.reg.List()
	st.mu.Lock()
	defer st.mu.Unlock()
	out.Pass, out.Checked = st.pass, st.checked
	for _, r := range regs {
		fs := FsStatus{FsID: r.ID, Node: r.Node, Path: r.Path, Settings: Describe(fsckSettings(r.Fsck))}
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
	return out
}

// Report lists the findings of class (all with ""), of filesystem fsid
// (all with 0).
func (s *Service) Report(class string, fsid uint32) ([]Finding, error) {
	var c Class
	if class != "" {
		var err error
		if c, err = ParseClass(class); err != nil {
			return nil, kerr.New(kerr.Invalid, "fsck report", class, err.Error())
		}
	}
	return s.st.book.List(func(f *Finding) bool {
		return (c == "" || f.Class == c) && (fsid == 0 || f.FsID == fsid)
	}), nil
}

// Request asks the storage servers to scan filesystem fsid (every
// registered one with 0) now; scrub makes the scans re-read the data.
func (s *Service) Request(fsid uint32, scrub bool) error {
	var ids []uint32
	for _, f := range s.reg.List() {
		if (fsid == 0 && f.BootStatus == "booted") || f.ID == fsid {
			ids = append(ids, f.ID)
		}
	}
	if fsid != 0 && len(ids) == 0 {
		return kerr.New(kerr.NotFound, "fsck run", fmt.Sprintf("fs %d", fsid), "no such filesystem")
	}
	st := s.st
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
	Finding
	Result string // repaired, dropped, skipped, failed
	Why    string
}

func (s *Service) orphanGrace() time.Duration {
	switch {
	case s.grace < 0:
		return 0
	case s.grace == 0:
		return DefaultOrphanGrace
	}
	return s.grace
}

// Repair repairs what is repairable of the findings of class ("all":
// every class, in priority order) on filesystem fsid (all with 0):
// stripes are rebuilt in place from the file's healthy ones, orphans older
// than the grace time and copies no file registers are queued for
// deletion. It returns when every repair has ended.
func (s *Service) Repair(ctx context.Context, class string, fsid uint32) (out []RepairOutcome, err error) {
	classes := Classes
	if class != "all" {
		c, err := ParseClass(class)
		if err != nil {
			return nil, kerr.New(kerr.Invalid, "fsck repair", class, err.Error()+" or all")
		}
		classes = []Class{c}
	}
	todo := s.st.book.List(func(f *Finding) bool {
		return slices.Contains(classes, f.Class) && (fsid == 0 || f.FsID == fsid || f.FsID == 0)
	})
	byFid := map[uint64][]Finding{}
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
	st := s.st
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
func (s *Service) repairFile(ctx context.Context, fid uint64, todo []Finding) []RepairOutcome {
	var out []RepairOutcome
	note := func(f Finding, result, why string) { out = append(out, RepairOutcome{f, result, why}) }
	st := s.st
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
	var file *File
	if n := states[0].File; n != nil {
		path, _ := s.ns.PathOf(n)
		file = fileOf(n, path)
	}
	plan := PlanRepair(file, todo, s.st.book.ForFile(fid), s.orphanGrace(), s.now())
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
	var dropped []Finding
	for _, f := range plan.Drop {
		switch {
		case states[0].Pending:
			note(f, "skipped", "an upload with this fid is in progress")
		case !rebuilt && f.Class != Orphan:
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
		s.st.book.Drop(f.Key())
		if f.Class != Orphan {
			s.st.book.Drop(Key{Class: Unreg, Fid: f.Fid, FsID: f.FsID, Stripe: f.Stripe})
			s.st.book.Drop(Key{Class: ReplicaDiff, Fid: f.Fid, FsID: f.FsID, Stripe: f.Stripe})
		}
	}
	return out
}

// rebuild has the storage servers holding stripes idx of file rebuild
// them (one job per server) and reports per finding; ok is false unless
// every stripe was rebuilt.
func (s *Service) rebuild(ctx context.Context, file *File, idx []int, todo []Finding) (out []RepairOutcome, ok bool) {
	note := func(f Finding, result, why string) { out = append(out, RepairOutcome{f, result, why}) }
	about := func(i int) []Finding {
		var fs []Finding
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
		node, up := s.reg.Readable(fsid)
		switch {
		case !up || node.HTTP == "":
			for _, f := range about(i) {
				note(f, "skipped", fmt.Sprintf("fs %d is not available (down, offline or off): bring it back, or declare it lost (fs config %d configstatus=lost) to rebuild its stripes on the others", fsid, fsid))
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
		DataVersion: file.DataVersion, Stale: file.Stale, Expires: s.now().Add(max(s.ttl, repairCapTTL)).Unix()}
	for _, fsid := range file.Locations {
		c.Targets = append(c.Targets, capability.Target{FsID: fsid, Addr: s.reg.Node(fsid).HTTP})
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
			if err == nil && slices.Contains(file.Stale, i) {
				if cerr := s.ns.ClearStale(file.Fid, file.DataVersion, i); cerr != nil {
					s.log.Warn("fsck: a rebuilt stale stripe is still recorded stale", "path", file.Path, "stripe", i, "err", cerr)
				}
			}
			if err == nil {
				s.st.book.DropStripe(file.Fid, file.Locations[i], i)
				s.st.inventoryAdd(file.Locations[i], file.Fid)
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

// Counters are fsck's counters for metrics.
type Counters struct {
	Findings  map[Class]int
	Checked   int64              // stripes compared
	Repairs   map[string]int64   // "class/result"
	Scanning  map[uint32]float64 // filesystems being scanned: fraction done
	PassFiles int64
}

// Counters returns fsck's counters.
func (s *Service) Counters() Counters {
	out := Counters{Findings: s.st.book.Counts(), Repairs: map[string]int64{}, Scanning: map[uint32]float64{}}
	st := s.st
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
