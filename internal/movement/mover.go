// Package movement is the namespace service's data movement (EOS:
// drain/, groupbalancer/, convert/ of the MGM): the namespace schedules,
// storage servers copy.
//
// The service knows every file's layout and locations and every
// filesystem's group, state and fill, so it decides what moves where:
// drains (drain.go) move every stripe off a filesystem in drain, the
// balancer (balance.go) moves stripes from fuller to emptier filesystems
// of a group, conversions (convert.go) rewrite files into another layout
// or space. A stripe move is always the same three steps (moveStripe):
//
//  1. namespace.BeginMove records the move before a byte is copied (the
//     target must hold no stripe of the file, live or queued for
//     deletion: physical names are file ids);
//  2. the storage server holding the target copies the stripe through
//     the mover (a replica from any replica, an EC stripe whole with its
//     frames checked, or rebuilt from the other stripes) and answers once
//     it is durable and verified (message.MoveOrder, a move capability);
//  3. namespace.FinishMove switches the location in one batch if the
//     file is still the one copied, queueing the old stripe for deletion
//     after a grace of one capability lifetime (reads granted before the
//     switch finish); otherwise the copy is queued for deletion.
//
// A move interrupted by a crash of the namespace server is rolled back
// when it starts again (namespace.AbortMoves): the copy, complete or
// not, is queued for deletion and the drain or balancer, whose intent
// is in the filesystem and group records, schedules it again. A storage
// server that dies mid-copy fails the order; the same rollback applies.
//
// The package sees the namespace through Namespace, the storage servers
// through Mover and the filesystems through the fleet's registry, where
// it registers its keys of `fs config` (drain.*) and `group set` (the
// balancer's).
package movement

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Namespace is what data movement needs of the namespace
// (namespace.Namespace implements it): files by id and in bulk, and the
// records of moves and conversions.
type Namespace interface {
	ByID(id uint64) (*namespace.Inode, string, error)
	GetAttr(c namespace.Caller, id uint64) (*namespace.Inode, error)
	ScanFiles(from []byte, max int, fn func(f *namespace.Inode)) (next []byte, err error)
	BeginMove(m namespace.Move) (*namespace.Inode, error)
	FinishMove(m namespace.Move, copied bool, deleteAt time.Time) (switched bool, err error)
	PendingMoves() ([]namespace.Move, error)
	LeftOn(fsid uint32) (namespace.Leftovers, error)
	BeginConvert(fid uint64, l layout.Layout, locs []uint32) (*namespace.Inode, error)
	FinishConvert(oldFid, newFid uint64, size int64, sums map[string]string, deleteAt time.Time) error
	AbortConvert(newFid uint64) error
}

// Config configures data movement.
type Config struct {
	NS    Namespace
	Fleet *fleet.Registry
	// Mover orders stripe moves and conversions at storage servers. Nil:
	// data movement fails, saying so.
	Mover Mover
	Key   *capability.Key // signs move orders
	TTL   time.Duration   // capability lifetime: how long replaced stripes stay readable
	// RebuildAfter is how long a filesystem may be unreadable before it
	// is declared lost and its stripes are rebuilt on the others (0:
	// only when an operator declares it lost).
	RebuildAfter time.Duration
	Now          func() time.Time
	Log          *slog.Logger
}

// Mover carries out movement orders at storage servers (addr is a
// storage server's HTTP base URL); cluster.StorageClient implements it.
type Mover interface {
	MoveStripe(ctx context.Context, addr string, o message.MoveOrder) (message.MoveResult, error)
	Convert(ctx context.Context, addr string, o message.ConvertOrder) (message.ConvertResult, error)
}

// Drain states (namespace.Filesystem.Drain, fs ls; fleet's).
const (
	DrainDraining   = fleet.DrainDraining
	DrainDrained    = fleet.DrainDrained
	DrainRebuilding = fleet.DrainRebuilding
	DrainEmpty      = fleet.DrainEmpty
)

// Defaults of the movement settings.
const (
	DefaultDrainParallel   = 4
	DefaultRebuildParallel = 4
	DefaultRebuildAfter    = 10 * time.Minute // Ceph's mon_osd_down_out_interval
	DefaultBalanceParallel = 2
	maxParallel            = 64
	moveCapTTL             = 24 * time.Hour // move orders never leave the servers
	maxFailuresShown       = 50
)

// MoveFailure is a stripe that could not be moved, and why.
type MoveFailure struct {
	Path   string
	Fid    uint64
	Stripe int
	Reason string
	Time   time.Time
}

// MoveCounters count what a kind of movement did since the service
// started.
type MoveCounters struct {
	Stripes  int64 // stripes (or, for conversions, files) moved
	Bytes    int64
	Failures int64
	Dropped  int64 // copies dropped because the file changed meanwhile
}

// Movement is what the service says about data movement, for fs ls, fs
// status, group ls and whoever exports metrics.
type Movement struct {
	Drains      []DrainProgress // drains and rebuilds (Kind)
	Balancers   []BalanceProgress
	Drain       MoveCounters
	Rebuild     MoveCounters
	Balance     MoveCounters
	Conversion  MoveCounters
	Conversions ConvertProgress
}

// MoveReporter is told about data movement as it happens (the metrics
// package's Movement implements it): kind is "drain", "rebuild",
// "balance" or "conversion", fsid the filesystem moved from ("" for
// conversions and for the balancers' progress, which span filesystems).
type MoveReporter interface {
	Progress(kind, fsid string, filesLeft, bytesLeft int64, running bool)
	Moved(kind, fsid string, bytes int64, ok bool)
}

// ReportMovement makes the service tell r about data movement (nil: no
// one).
func (m *Service) ReportMovement(r MoveReporter) {
	m.mu.Lock()
	m.reporter = r
	m.mu.Unlock()
}

// report calls the reporter, if any, outside m.mu.
func (m *Service) report(fn func(r MoveReporter)) {
	m.mu.Lock()
	r := m.reporter
	m.mu.Unlock()
	if r != nil {
		fn(r)
	}
}

// moved tells the reporter about one stripe (or file) of kind moved from
// fs from (0: none) or not.
func (m *Service) moved(kind string, from uint32, bytes int64, ok bool) {
	fsid := ""
	if from != 0 {
		fsid = strconv.FormatUint(uint64(from), 10)
	}
	m.report(func(r MoveReporter) { r.Moved(kind, fsid, bytes, ok) })
}

// reportProgress tells the reporter where every movement stands.
func (m *Service) reportProgress() {
	mv := m.Movement()
	m.report(func(r MoveReporter) {
		for _, d := range mv.Drains {
			r.Progress(d.Kind, strconv.FormatUint(uint64(d.FsID), 10), d.FilesLeft, d.BytesLeft, d.Status == DrainDraining || d.Status == DrainRebuilding)
		}
		balancing := false
		for _, b := range mv.Balancers {
			balancing = balancing || b.InFlight > 0
		}
		r.Progress("balance", "", 0, 0, balancing)
		r.Progress("conversion", "", int64(mv.Conversions.Pending), 0, mv.Conversions.Pending > 0)
	})
}

// Service is the scheduler of data movement.
type Service struct {
	ns    Namespace
	reg   *fleet.Registry
	mover Mover
	key   *capability.Key
	ttl   time.Duration
	now   func() time.Time
	log   *slog.Logger

	rebuildAfter time.Duration
	risk         riskState // what the files risk now (risk.go)

	mu        sync.Mutex
	drains    map[uint32]*drainJob
	balancers map[string]*balanceJob
	adjust    []adjustment // bytes in flight or recently moved, not yet in the reports
	counters  map[string]*MoveCounters
	convert   convertState
	reporter  MoveReporter
	kick      chan struct{} // the conversion policies changed
	changed   chan struct{} // a filesystem or group setting changed
}

// adjustment is a change of a filesystem's used bytes its storage server
// has not reported yet: a move in flight onto it (+), a stripe moved away
// whose deletion is still queued (-). A storage server reports its usage
// in the heartbeat that acknowledges a deletion, measured after it.
type adjustment struct {
	fs    uint32
	bytes int64
	until time.Time           // zero: until removed (or, with del, until deleted)
	id    *int                // identity of an in-flight reservation
	del   *namespace.Deletion // until acked
}

// New makes the scheduler and registers its keys with the fleet.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	m := &Service{ns: cfg.NS, reg: cfg.Fleet, mover: cfg.Mover, key: cfg.Key, ttl: cfg.TTL, now: cfg.Now, log: cfg.Log,
		rebuildAfter: cfg.RebuildAfter, drains: map[uint32]*drainJob{}, balancers: map[string]*balanceJob{},
		counters: map[string]*MoveCounters{"drain": {}, "rebuild": {}, "balance": {}, "convert": {}}, kick: make(chan struct{}, 1),
		changed: make(chan struct{}, 1)}
	cfg.Fleet.RegisterKeys(drainKeys...)
	cfg.Fleet.RegisterKeys(rebuildKeys...)
	cfg.Fleet.RegisterGroupKeys(balancerKeys...)
	return m
}

// Run starts and stops drains and balancers as the registry says, and
// applies the conversion policies, until ctx ends.
func (m *Service) Run(ctx context.Context) {
	go m.runPolicies(ctx)
	go m.runSurvey(ctx)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		m.reconcile(ctx)
		m.reportProgress()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.changed:
		}
	}
}

// SettingsChanged makes Run reconcile at once (a drain starts without
// waiting for the next tick).
func (m *Service) SettingsChanged() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// reconcile matches running jobs with the registry: a drain per
// filesystem in drain not yet drained, a rebuild per lost filesystem
// not yet empty (declaring lost those unreadable for longer than the
// grace first), a balancer per group with the balancer on.
func (m *Service) reconcile(ctx context.Context) {
	fss := m.reg.List()
	if m.declareLost(fss) {
		fss = m.reg.List()
	}
	want := map[uint32]bool{} // filesystems to drain (false) or rebuild (true)
	for _, f := range fss {
		if f.ConfigStatus == "drain" && f.Drain == DrainDraining || f.ConfigStatus == "lost" && f.Drain == DrainRebuilding {
			want[f.ID] = f.ConfigStatus == "lost"
		}
	}
	groups := map[string]bool{}
	for _, g := range m.reg.Groups() {
		if g.Balancer {
			groups[g.Name] = true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, j := range m.drains {
		if lost, ok := want[id]; (!ok || lost != j.lost) && !j.ended() {
			j.cancel()
		}
		if _, ok := want[id]; !ok && j.ended() && !m.isDraining(id) {
			delete(m.drains, id) // configstatus changed: forget its progress
		}
	}
	for id, lost := range want {
		if j := m.drains[id]; j == nil || j.ended() || j.lost != lost {
			m.drains[id] = m.startDrain(ctx, id)
		}
	}
	for name, j := range m.balancers {
		if !groups[name] {
			j.cancel()
			delete(m.balancers, name)
		}
	}
	for name := range groups {
		if m.balancers[name] == nil {
			m.balancers[name] = m.startBalancer(ctx, name)
		}
	}
}

// isDraining reports whether fs id is in configstatus drain or lost.
func (m *Service) isDraining(id uint32) bool {
	f, ok := m.reg.Filesystem(id)
	return ok && (f.ConfigStatus == "drain" || f.ConfigStatus == "lost")
}

// count adds to the counters of kind (drain, balance, convert).
func (m *Service) count(kind string, fn func(c *MoveCounters)) {
	m.mu.Lock()
	fn(m.counters[kind])
	m.mu.Unlock()
}

// reserve counts bytes on their way onto fs until release.
func (m *Service) reserve(fs uint32, bytes int64) (release func()) {
	id := new(int)
	m.mu.Lock()
	m.adjust = append(m.adjust, adjustment{fs: fs, bytes: bytes, id: id})
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for i, a := range m.adjust {
			if a.id == id {
				m.adjust = slices.Delete(m.adjust, i, i+1)
				return
			}
		}
	}
}

// settle records a finished move until the storage servers' reports
// show it: the target holds the bytes from its next reports, the source
// until its storage server acknowledged the deletion of the old stripe.
// A lost source is left out: it takes no stripes, so its fill matters
// to no one, and a dead disk never acknowledges a deletion (one entry
// per stripe rebuilt would pile up, walked by every choice of a target).
func (m *Service) settle(mv namespace.Move, bytes int64) {
	lag := 2*m.reg.Interval() + time.Second
	adj := []adjustment{{fs: mv.To, bytes: bytes, until: time.Now().Add(lag)}}
	if f, _ := m.reg.Filesystem(mv.From); f.ConfigStatus != "lost" {
		adj = append(adj, adjustment{fs: mv.From, bytes: -bytes, del: &namespace.Deletion{FsID: mv.From, Fid: mv.Fid, Stripe: mv.Stripe}})
	}
	m.mu.Lock()
	m.adjust = append(m.adjust, adj...)
	m.mu.Unlock()
}

// Acked drops the moved-away stripes whose deletion a storage server
// acknowledged (Heartbeat calls it once that server's report, measured
// after the deletions, is recorded).
func (m *Service) Acked(ds []namespace.Deletion) {
	if len(ds) == 0 {
		return
	}
	done := make(map[namespace.Deletion]bool, len(ds))
	for _, d := range ds {
		done[d] = true
	}
	m.mu.Lock()
	m.adjust = slices.DeleteFunc(m.adjust, func(a adjustment) bool { return a.del != nil && done[*a.del] })
	m.mu.Unlock()
}

// pending is, per filesystem, the bytes not yet in its reports (see
// adjustment), from one walk of the adjustments.
func (m *Service) pending() map[uint32]int64 {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[uint32]int64{}
	keep := m.adjust[:0]
	for _, a := range m.adjust {
		if !a.until.IsZero() && now.After(a.until) {
			continue
		}
		keep = append(keep, a)
		out[a.fs] += a.bytes
	}
	m.adjust = keep
	return out
}

// stripeBytes is the size of one stripe of f.
func stripeBytes(f *namespace.Inode) int64 {
	l, err := layout.Parse(f.Layout)
	if err != nil {
		return f.Size
	}
	return erasure.StripeSize(l, f.Size)
}

// outcome of one stripe move.
type outcome int

const (
	moved  outcome = iota // switched
	gone                  // nothing to do: the file or stripe is no longer there, or changed during the copy
	busy                  // the target cannot take a stripe of this file now
	failed                // the copy failed (err says why)
)

// pace is how a move is throttled: at most rate bytes per second (0:
// no cap), and, with yield, giving way to the storage server's client
// streams.
type pace struct {
	rate  int64
	yield bool
}

// moveStripe moves stripe idx of file fid from fs from to fs to (the
// three steps in the package notes), throttled by p. The caller
// reserves the bytes on the target while it runs (Service.reserve),
// before it chooses the next target.
func (m *Service) moveStripe(ctx context.Context, fid uint64, idx int, from, to uint32, p pace) (message.MoveResult, outcome, error) {
	mv := namespace.Move{Fid: fid, Stripe: idx, From: from, To: to}
	f, err := m.ns.BeginMove(mv)
	switch {
	case kerr.Is(err, kerr.Busy), kerr.Is(err, kerr.Exists):
		return message.MoveResult{}, busy, err
	case kerr.Is(err, kerr.NotFound), kerr.Is(err, kerr.IsDir):
		return message.MoveResult{}, gone, err
	case err != nil:
		return message.MoveResult{}, failed, err
	}
	size := stripeBytes(f)
	path := m.pathOfID(fid)
	var res message.MoveResult
	if m.mover == nil {
		err = kerr.New(kerr.Unsupported, "move", path, "this namespace server cannot order moves")
	} else {
		o := message.MoveOrder{Token: m.moveToken(f, path, idx, to), Rate: p.rate, Yield: p.yield, Avoid: m.unreadable(f.Locations)}
		res, err = m.mover.MoveStripe(ctx, m.reg.Node(to).HTTP, o)
	}
	deleteAt := m.now().Add(m.ttl)
	switched, ferr := m.ns.FinishMove(mv, err == nil, deleteAt)
	switch {
	case err != nil:
		return res, failed, err
	case ferr != nil:
		return res, failed, ferr
	case !switched:
		return res, gone, kerr.New(kerr.NotFound, "move", path, "the file changed during its move; the copy is dropped")
	}
	m.settle(mv, size)
	return res, moved, nil
}

// moveToken signs the order to copy stripe idx of f to fs to.
func (m *Service) moveToken(f *namespace.Inode, path string, idx int, to uint32) string {
	c := &capability.Capability{Fid: f.ID, Path: path, Layout: f.Layout, Size: f.Size, Sums: f.Checksums,
		DataVersion: f.DataVersion, Stale: f.Stale, Expires: m.now().Add(moveCapTTL).Unix(),
		Move: &capability.Move{Stripe: idx, Dst: capability.Target{FsID: to, Addr: m.reg.Node(to).HTTP}}}
	for _, id := range f.Locations {
		c.Targets = append(c.Targets, capability.Target{FsID: id, Addr: m.reg.Node(id).HTTP})
	}
	return m.key.Sign(c)
}

// unreadable lists the stripes of a file at locs whose filesystems
// cannot be read now (down, offline, off).
func (m *Service) unreadable(locs []uint32) []int {
	var out []int
	for i, id := range locs {
		if _, ok := m.reg.Readable(id); !ok {
			out = append(out, i)
		}
	}
	return out
}

// pathOfID is the path of file fid for messages ("fid N" if unknown).
func (m *Service) pathOfID(fid uint64) string {
	if _, p, err := m.ns.ByID(fid); err == nil {
		return p
	}
	return fmt.Sprintf("fid %d", fid)
}

// target picks the filesystem of group that takes stripe idx of f,
// leaving fs from: writable, booted, healthy, not slow (as placement), on
// a live node, holding no
// stripe of f, not in exclude, with room for size bytes (counting moves
// in flight onto it); those spreading the file's stripes best over
// storage servers and locations first (fleet.Spread, as placement), then
// the most free space. With none, why says for each filesystem of the
// group why not.
func (m *Service) target(f *namespace.Inode, idx int, from uint32, group string, size int64, exclude map[uint32]bool) (uint32, string) {
	type cand struct {
		fs   *fleet.FsState
		free int64
	}
	all := m.reg.List() // by id
	avoidSlow := m.reg.AvoidSlow()
	held := m.spreadOf(all, f.Locations, idx)
	var cands []cand
	var why []string
	pending := m.pending()
	for k := range all {
		g := &all[k]
		if g.Group != group || g.ID == from {
			continue
		}
		free := int64(g.Capacity-min(g.Used, g.Capacity)) - pending[g.ID]
		switch {
		case slices.Contains(f.Locations, g.ID):
			why = append(why, fmt.Sprintf("fs %d holds stripe %d", g.ID, slices.Index(f.Locations, g.ID)))
		case exclude[g.ID]:
			why = append(why, fmt.Sprintf("fs %d still has a stripe of the file queued for deletion", g.ID))
		case g.ConfigStatus != "rw":
			why = append(why, fmt.Sprintf("fs %d is %s", g.ID, g.ConfigStatus))
		case g.BootStatus != "booted" || !g.DownSince.IsZero():
			why = append(why, fmt.Sprintf("fs %d is not booted", g.ID))
		case g.Health != "ok":
			why = append(why, fmt.Sprintf("fs %d: %s", g.ID, g.Health))
		case g.Slow != "" && avoidSlow:
			why = append(why, fmt.Sprintf("fs %d is slow: %s", g.ID, g.Slow))
		case free < size:
			why = append(why, fmt.Sprintf("fs %d has %s free, the stripe needs %s", g.ID, compact(max(free, 0)), compact(size)))
		default:
			cands = append(cands, cand{g, free})
		}
	}
	if len(cands) == 0 {
		if len(why) == 0 {
			why = append(why, "it has no other filesystem")
		}
		return 0, fmt.Sprintf("group %s cannot hold it: %s", group, strings.Join(why, "; "))
	}
	sort.Slice(cands, func(i, j int) bool {
		if c := held.Compare(cands[i].fs, cands[j].fs); c != 0 {
			return c < 0
		}
		return cands[i].free > cands[j].free
	})
	return cands[0].fs.ID, ""
}

// spreadOf counts the stripes at locs over their failure domains, but
// stripe skip's (all is the registry's list, by id).
func (m *Service) spreadOf(all []fleet.FsState, locs []uint32, skip int) fleet.Spread {
	held := fleet.Spread{}
	for j, id := range locs {
		if i, ok := slices.BinarySearchFunc(all, id, func(g fleet.FsState, id uint32) int { return cmp.Compare(g.ID, id) }); ok && j != skip {
			held.Add(&all[i])
		}
	}
	return held
}

// compact prints a byte count without spaces (in placement refusals).
func compact(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%dB", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// rateWindow measures a rate over the last minute of completions.
type rateWindow struct {
	start  time.Time
	events []rateEvent
}

type rateEvent struct {
	t     time.Time
	bytes int64
}

const rateSpan = time.Minute

func (w *rateWindow) add(now time.Time, bytes int64) {
	w.events = append(w.events, rateEvent{now, bytes})
	w.trim(now)
}

func (w *rateWindow) trim(now time.Time) {
	i := 0
	for i < len(w.events) && now.Sub(w.events[i].t) > rateSpan {
		i++
	}
	w.events = w.events[i:]
}

// rate is bytes per second over the last minute (or since start).
func (w *rateWindow) rate(now time.Time) float64 {
	w.trim(now)
	span := min(now.Sub(w.start), rateSpan)
	if span <= 0 || len(w.events) == 0 {
		return 0
	}
	var sum int64
	for _, e := range w.events {
		sum += e.bytes
	}
	return float64(sum) / max(span.Seconds(), 1)
}

// failures keeps the latest failure per stripe.
type failures struct {
	byKey map[string]MoveFailure
	total int64
}

func (f *failures) add(mf MoveFailure) {
	if f.byKey == nil {
		f.byKey = map[string]MoveFailure{}
	}
	f.byKey[fmt.Sprintf("%d/%d", mf.Fid, mf.Stripe)] = mf
	f.total++
}

func (f *failures) clear(fid uint64, stripe int) { delete(f.byKey, fmt.Sprintf("%d/%d", fid, stripe)) }

// list is the current failures, latest first, at most maxFailuresShown.
func (f *failures) list() []MoveFailure {
	out := make([]MoveFailure, 0, len(f.byKey))
	for _, mf := range f.byKey {
		out = append(out, mf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	if len(out) > maxFailuresShown {
		out = out[:maxFailuresShown]
	}
	return out
}

// Movement reports data movement.
func (m *Service) Movement() Movement {
	var out Movement
	m.mu.Lock()
	drains := make([]*drainJob, 0, len(m.drains))
	for _, j := range m.drains {
		drains = append(drains, j)
	}
	bals := make([]*balanceJob, 0, len(m.balancers))
	for _, j := range m.balancers {
		bals = append(bals, j)
	}
	out.Drain, out.Rebuild, out.Balance, out.Conversion = *m.counters["drain"], *m.counters["rebuild"], *m.counters["balance"], *m.counters["convert"]
	out.Conversions = m.convert.progress()
	m.mu.Unlock()
	for _, j := range drains {
		out.Drains = append(out.Drains, j.progress())
	}
	sort.Slice(out.Drains, func(i, j int) bool { return out.Drains[i].FsID < out.Drains[j].FsID })
	for _, j := range bals {
		out.Balancers = append(out.Balancers, j.progress())
	}
	sort.Slice(out.Balancers, func(i, j int) bool { return out.Balancers[i].Group < out.Balancers[j].Group })
	return out
}
