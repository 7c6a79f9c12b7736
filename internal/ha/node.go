// Package ha runs one namespace server of a replicated Kaon instance: the
// namespace lives in a shared engine (etcd, behind kv.Engine and
// kv.Elector), one server is active through an election and the others are
// standbys that keep a replica warm and send clients to the active one.
//
//   - Replica (replica.go): the local copy of the namespace, loaded once
//     and fed by the shared engine's watch; what every server reads.
//   - Pipeline (pipeline.go): the active server's kv.Store, its writes
//     applied at once over the replica and committed in guarded groups.
//   - Node (this file): the session, the campaign, the active role's life
//     (open the service over a pipeline, hand over, give up when fenced or
//     cut off), and what each server publishes about itself.
//
// Keys in the shared engine: NSPrefix + the namespace's own keys;
// "ha/election/..." the candidacies (etcd's election); "ha/members/ID" each
// server's status, bound to its session; "ha/term" the active server's
// term; "ha/handover" what one that stepped down hands over (handover.go).
// The design and the figures are in docs/DESIGN.md (section 4) and
// docs/DESIGN-NOTES.md.
package ha

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
)

// Key layout in the shared engine.
var (
	NSPrefix = []byte("n/") // the namespace's keys
)

const (
	electionName  = "ha/election"
	membersPrefix = "ha/members/"
	termKey       = "ha/term"
)

// DefaultLease is the session TTL: how long a server that died or was cut
// off keeps the active role before a standby takes over.
const DefaultLease = 5 * time.Second

// publishEvery is how often a server publishes its status.
const publishEvery = time.Second

// Member is how a namespace server is reached.
type Member struct {
	ID     string `json:"id"`
	HTTP   string `json:"http"`             // http://host:port
	XRootD string `json:"xrootd,omitempty"` // host:port of its root:// listener
}

// Role of a server.
type Role string

const (
	Starting Role = "starting" // loading its replica
	Standby  Role = "standby"
	Active   Role = "active"
)

// ServerStatus is what a server publishes about itself every second.
type ServerStatus struct {
	Member
	Role      Role      `json:"role"`
	Since     time.Time `json:"since"`               // in this role since
	Applied   uint64    `json:"applied"`             // revision its replica is at
	Committed uint64    `json:"committed,omitempty"` // active: revision of its last commit
	Updated   time.Time `json:"updated"`
	Error     string    `json:"error,omitempty"` // why it cannot follow or serve now
}

// Config configures a Node.
type Config struct {
	Remote kv.Engine // the shared engine; must implement kv.Elector
	Local  kv.Engine // the replica's store (Pebble on the data disk)
	Self   Member
	Lease  time.Duration // session TTL (default DefaultLease)
	// KeepHistory is how much of the shared engine's history the active
	// server keeps: every KeepHistory it compacts what is older (kv.
	// Compactor; 0: never, the engine's own compaction must do it).
	KeepHistory time.Duration
	// Serve opens the namespace service over store when this server
	// becomes active, and returns what the front ends serve; ctx ends when
	// the active role does (the service must stop its background work).
	// term names this active role (kv.Leadership.Rev: it grows with every
	// election). handed is what the previous active server's HandOver
	// returned when it stepped down cleanly (nil after a crash, or
	// without HandOver).
	Serve func(ctx context.Context, store kv.Store, term uint64, handed []byte) (any, error)
	// HandOver, if set, is asked what the service svc hands its successor
	// when this server steps down or shuts down, once its store took the
	// last write (handover.go).
	HandOver func(svc any) []byte
	Logger   *slog.Logger
}

// View is what a request arriving at this server meets.
type View struct {
	Role    Role
	Service any    // Role == Active: the service Serve returned (nil when the role cannot be proved held: Err says so)
	Active  Member // the active server, when one is known (ID "" when not)
	Err     error  // not active and no active server to send clients to: why
}

// Node is one namespace server of a replicated instance.
type Node struct {
	cfg     Config
	el      kv.Elector
	replica *Replica
	log     *slog.Logger

	mu        sync.Mutex
	view      View
	since     time.Time
	pipe      *Pipeline
	session   kv.Session
	stepDown  chan chan error // requests to hand over, served by the active role
	leader    Member          // last leader read, and when
	leaderAt  time.Time
	engineErr error // last failure to reach the shared engine (nil after a success)
	leaderCh  chan struct{}
	publishCh chan struct{} // publish now (a new session, a new role)
	// term is the active server's term as last read (its candidacy's
	// revision); activeCommitted the revision of its last commit as it
	// last published it (read from the watch, for Figures).
	term, activeCommitted uint64
}

// New prepares a node; Run runs it.
func New(cfg Config) (*Node, error) {
	el, ok := cfg.Remote.(kv.Elector)
	if !ok {
		return nil, kerr.New(kerr.Invalid, "ha", "", "the shared engine has no elections (use etcd)")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("server", cfg.Self.ID)
	n := &Node{cfg: cfg, el: el, log: log, replica: NewReplica(cfg.Remote, cfg.Local, log),
		stepDown: make(chan chan error), since: time.Now(), leaderCh: make(chan struct{}, 1), publishCh: make(chan struct{}, 1)}
	n.view = View{Role: Starting, Err: kerr.New(kerr.Busy, "namespace", cfg.Self.HTTP, "this namespace server is starting; retry")}
	n.replica.SetOnOther(n.otherChange)
	return n, nil
}

// View is the server's current view. An active server serves only while
// it can prove it still holds the role (leaseLocked): otherwise its view
// has no service, and why.
func (n *Node) View() View {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := n.view
	if v.Role != Active {
		v.Active, v.Err = n.activeLocked()
		return v
	}
	if err := n.leaseLocked(time.Now()); err != nil {
		return View{Role: Active, Err: err}
	}
	return v
}

// leaseLocked says why the active role cannot be proved held at now: when
// now is past the session's HeldUntil, less a tenth of the lease for the
// drift between this host's clock and etcd's leader's (TiKV counts 9 s of
// a 10 s election timeout), etcd may have let the lease expire and
// another server be elected, which may acknowledge writes this one does
// not see. Reads stop then, before the new server can start (it waits for
// the lease to expire in etcd); writes are fenced in etcd anyway. They go
// on if a renewal goes through again (the lease held: etcd's leader was
// being elected, or the link came back).
func (n *Node) leaseLocked(now time.Time) error {
	var held time.Time
	if n.session != nil {
		held = n.session.HeldUntil()
	}
	if now.Before(held.Add(-n.cfg.Lease / 10)) {
		return nil
	}
	return &kerr.Error{Kind: kerr.Down, Op: "namespace", Path: n.cfg.Self.HTTP,
		Msg: "namespace unavailable: this server's lease in the store (etcd) was not renewed in time, so it cannot tell whether it is still the active server; retry"}
}

// activeLocked is the active server to send clients to, or why there is
// none: a leader read more than a lease ago is not trusted.
func (n *Node) activeLocked() (Member, error) {
	fresh := time.Since(n.leaderAt) < n.cfg.Lease
	switch {
	case n.leader.ID != "" && n.leader.ID != n.cfg.Self.ID && fresh:
		return n.leader, nil
	case n.engineErr != nil:
		return Member{}, &kerr.Error{Kind: kerr.Down, Op: "namespace", Path: n.cfg.Self.HTTP,
			Msg: "namespace unavailable: its store (etcd) cannot be reached or has no quorum", Err: n.engineErr}
	case n.view.Role == Starting:
		return Member{}, n.view.Err
	}
	return Member{}, kerr.New(kerr.Busy, "namespace", n.cfg.Self.HTTP, "no active namespace server yet (an election is under way); retry")
}

func (n *Node) setRole(r Role, svc any) {
	n.mu.Lock()
	if n.view.Role != r {
		n.since = time.Now()
		n.log.Info("namespace server role", "role", r)
	}
	n.view = View{Role: r, Service: svc}
	if r == Active {
		n.view.Active = n.cfg.Self
	}
	n.mu.Unlock()
	n.publishNow()
}

func (n *Node) publishNow() {
	select {
	case n.publishCh <- struct{}{}:
	default:
	}
}

// engineOK and engineFailed track whether the shared engine answers.
func (n *Node) engineOK() {
	n.mu.Lock()
	n.engineErr = nil
	n.mu.Unlock()
}

func (n *Node) engineFailed(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	n.mu.Lock()
	n.engineErr = err
	n.mu.Unlock()
}

// otherChange is the replica's hook for keys outside the namespace: a
// candidacy changed, the leader may have.
func (n *Node) otherChange(ev kv.Event) {
	if strings.HasPrefix(string(ev.Key), electionName+"/") {
		n.kickLeader()
	}
	var st ServerStatus
	if strings.HasPrefix(string(ev.Key), membersPrefix) && !ev.Delete && json.Unmarshal(ev.Value, &st) == nil && st.Role == Active {
		n.mu.Lock()
		n.activeCommitted = max(n.activeCommitted, st.Committed)
		n.mu.Unlock()
	}
}

// Figures are what metrics show of a server.
type Figures struct {
	Role    Role
	Term    uint64 // the active server's term (revision of its election), 0 when none is known
	Applied uint64 // revision the replica is at
	// Lag is how many revisions the replica is behind the last commit the
	// active server published (every second); 0 on the active server.
	Lag uint64
}

// Figures reads the server's figures (no request to the shared engine).
func (n *Node) Figures() Figures {
	n.mu.Lock()
	f := Figures{Role: n.view.Role, Term: n.term}
	committed := n.activeCommitted
	n.mu.Unlock()
	f.Applied = n.replica.Applied()
	if f.Role != Active && committed > f.Applied {
		f.Lag = committed - f.Applied
	}
	return f
}

// kickLeader has watchLeader read the leader again now.
func (n *Node) kickLeader() {
	select {
	case n.leaderCh <- struct{}{}:
	default:
	}
}

// Run runs the node until ctx ends, then gives up the active role and ends
// its session.
func (n *Node) Run(ctx context.Context) error {
	go n.replica.Run(ctx)
	go n.watchLeader(ctx)
	go n.publish(ctx)
	if err := n.replica.WaitLoaded(ctx); err != nil {
		return err
	}
	n.setRole(Standby, nil)
	bo := newBackoff()
	for ctx.Err() == nil {
		s, err := n.el.NewSession(ctx, n.cfg.Lease)
		if err != nil {
			n.engineFailed(err)
			n.log.Warn("cannot start a session with the shared engine", "err", err)
			bo.wait(ctx)
			continue
		}
		n.mu.Lock()
		n.session = s
		n.mu.Unlock()
		n.publishNow()
		n.campaign(ctx, s)
		n.mu.Lock()
		n.session = nil
		n.mu.Unlock()
		_ = s.Close()
		bo.wait(ctx)
	}
	return nil
}

// campaign runs the session's candidacies: standby while waiting, active
// once elected, again after handing over, until the session ends.
func (n *Node) campaign(ctx context.Context, s kv.Session) {
	val, _ := json.Marshal(n.cfg.Self)
	bo := newBackoff()
	for ctx.Err() == nil {
		select {
		case <-s.Done():
			n.log.Warn("session with the shared engine ended")
			return
		default:
		}
		l, err := s.Campaign(ctx, electionName, val)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			n.engineFailed(err)
			n.log.Warn("campaign failed", "err", err)
			bo.wait(ctx)
			continue
		}
		bo = newBackoff()
		resign, reply := n.lead(ctx, s, l)
		n.setRole(Standby, nil)
		if !resign {
			return // lost the role: a new session
		}
		rctx, cancel := context.WithTimeout(context.Background(), n.cfg.Lease)
		err = l.Resign(rctx)
		cancel()
		if err == nil {
			n.kickLeader() // name the successor at once
		}
		if reply != nil { // a step-down returns once resigned
			reply <- err
		}
		if err != nil {
			n.log.Warn("resigning the active role failed (the session ends instead)", "err", err)
			return
		}
	}
}

// lead holds the active role until it ends; it reports whether the node
// should resign and campaign again in the same session (a handover)
// rather than start a new session, and the step-down to answer once
// resigned.
func (n *Node) lead(ctx context.Context, s kv.Session, l kv.Leadership) (resign bool, stepDown chan error) {
	log := n.log.With("term", l.Rev())
	handed, err := takeHandOver(ctx, n.cfg.Remote, l.Cond())
	if err != nil {
		log.Warn("elected, but what the previous active server handed over could not be read (starting as after a crash)", "err", err)
	}
	// A guarded write proves the role and orders it after every commit of
	// the previous active server; once the replica has it, it has those.
	term, _ := json.Marshal(map[string]any{"id": n.cfg.Self.ID, "rev": l.Rev(), "since": time.Now()})
	b := n.cfg.Remote.NewBatch()
	b.If(l.Cond())
	b.Put([]byte(termKey), term)
	if err := b.Commit(true); err != nil {
		log.Warn("elected, but the first guarded commit failed", "err", err)
		n.engineFailed(err)
		return !errors.Is(err, kv.ErrCondFailed), nil
	}
	wctx, cancel := context.WithTimeout(ctx, 10*n.cfg.Lease)
	err = n.replica.WaitApplied(wctx, b.Rev())
	cancel()
	if err != nil {
		log.Warn("elected, but the replica did not catch up", "revision", b.Rev(), "err", err)
		return true, nil
	}
	// From here on only this server writes the namespace: its commits
	// feed the replica; the watch resumes where they left it when the
	// role ends (and brings what an ambiguous last commit did).
	n.replica.Pause()
	p := newPipeline(n.cfg.Remote, n.replica, l.Cond(), 2*n.cfg.Lease)
	n.mu.Lock()
	n.pipe = p
	n.mu.Unlock()
	defer func() {
		p.Close()
		n.mu.Lock()
		n.pipe = nil
		n.mu.Unlock()
		n.replica.Resume()
	}()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	svc, err := n.cfg.Serve(sctx, p, uint64(l.Rev()), handed)
	if err != nil {
		log.Error("elected, but the namespace service did not open", "err", err)
		return true, nil
	}
	n.setRole(Active, svc)
	log.Info("active namespace server", "revision", b.Rev())
	go n.compact(sctx, log)
	select {
	case <-ctx.Done():
		// Shutting down: commit what was applied, then hand over.
		_ = n.handOver(context.Background(), p, l, svc, log)
		return true, nil
	case <-p.Done():
		err := p.Err()
		log.Warn("giving up the active role: a commit failed", "err", err)
		if kerr.Is(err, kerr.Down) {
			n.engineFailed(err)
		}
		return !kerr.Is(err, kerr.Busy), nil // fenced: the role is gone already
	case <-s.Done():
		// The lease lapsed (this process froze, or was cut off): a
		// guarded commit tells whether etcd still takes ours.
		n.setRole(Standby, nil)
		p.Close()
		fb := n.cfg.Remote.NewBatch()
		fb.If(l.Cond())
		fb.Put([]byte(termKey), term)
		switch err := fb.Commit(true); {
		case errors.Is(err, kv.ErrCondFailed):
			log.Warn("session expired; the shared engine refused this server's commit: fenced, now a standby")
		default:
			log.Warn("session expired; giving up the active role", "check", err)
		}
		return false, nil
	case reply := <-n.stepDown:
		if err := n.handOver(ctx, p, l, svc, log); err != nil {
			reply <- err
			return true, nil
		}
		return true, reply
	}
}

// compact keeps KeepHistory of the shared engine's history while this
// server is active: at every tick it compacts to the revision it noted at
// the tick before (as kube-apiserver does with etcd). A standby whose
// replica falls further behind reloads it.
func (n *Node) compact(ctx context.Context, log *slog.Logger) {
	c, ok := n.cfg.Remote.(kv.Compactor)
	if !ok || n.cfg.KeepHistory <= 0 {
		return
	}
	t := time.NewTicker(n.cfg.KeepHistory)
	defer t.Stop()
	noted := n.replica.Applied()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, max(n.cfg.KeepHistory, time.Minute))
		err := c.Compact(cctx, noted)
		cancel()
		if err != nil {
			log.Warn("compacting the shared engine's history failed", "revision", noted, "err", err)
		} else {
			log.Debug("compacted the shared engine's history", "revision", noted)
		}
		noted = n.replica.Applied()
	}
}

// handOver stops taking writes, waits for the pipeline to drain, records
// what the service svc hands over, and lets the caller resign.
func (n *Node) handOver(ctx context.Context, p *Pipeline, l kv.Leadership, svc any, log *slog.Logger) error {
	log.Info("stepping down: handing the active role over")
	p.Refuse(&kerr.Error{Kind: kerr.Busy, Op: "namespace", Msg: "retry", Err: ErrHandover})
	dctx, cancel := context.WithTimeout(ctx, 10*n.cfg.Lease)
	defer cancel()
	if err := p.Drain(dctx); err != nil {
		return err
	}
	n.writeHandOver(l, svc, log)
	return nil
}

// StepDown hands the active role to a standby (for upgrades): writes
// already applied are committed first, then the server resigns and
// campaigns again, behind the others. It returns once resigned.
func (n *Node) StepDown(ctx context.Context) error {
	n.mu.Lock()
	active := n.view.Role == Active
	n.mu.Unlock()
	if !active {
		return kerr.New(kerr.Invalid, "step-down", n.cfg.Self.HTTP, "this server is not the active namespace server")
	}
	reply := make(chan error, 1)
	select {
	case n.stepDown <- reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watchLeader keeps the leader known: read again whenever a candidacy
// changes, and every lease otherwise.
func (n *Node) watchLeader(ctx context.Context) {
	t := time.NewTicker(n.cfg.Lease / 2)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, n.cfg.Lease)
		v, term, err := n.el.Leader(rctx, electionName)
		cancel()
		var m Member
		switch {
		case err == nil:
			if json.Unmarshal(v, &m) != nil {
				m = Member{}
			}
			fallthrough
		case errors.Is(err, kv.ErrNotFound):
			n.mu.Lock()
			n.leader, n.leaderAt, n.term = m, time.Now(), term
			n.mu.Unlock()
			n.engineOK()
		default:
			n.engineFailed(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-n.leaderCh:
		case <-t.C:
		}
	}
}

// status is what this server publishes now.
func (n *Node) status() ServerStatus {
	n.mu.Lock()
	st := ServerStatus{Member: n.cfg.Self, Role: n.view.Role, Since: n.since, Updated: time.Now()}
	if n.pipe != nil {
		st.Committed = n.pipe.Stats().Committed
	}
	if n.engineErr != nil {
		st.Error = n.engineErr.Error()
	}
	n.mu.Unlock()
	st.Applied = n.replica.Applied()
	if err := n.replica.Err(); err != nil && st.Error == "" {
		st.Error = "replica behind: " + err.Error()
	}
	return st
}

// publish writes the server's status under its session every second.
func (n *Node) publish(ctx context.Context) {
	t := time.NewTicker(publishEvery)
	defer t.Stop()
	for {
		n.mu.Lock()
		s := n.session
		n.mu.Unlock()
		if s != nil {
			b, _ := json.Marshal(n.status())
			pctx, cancel := context.WithTimeout(ctx, publishEvery)
			err := s.Put(pctx, []byte(membersPrefix+n.cfg.Self.ID), b)
			cancel()
			if err != nil {
				n.engineFailed(err)
			} else {
				n.engineOK()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.publishCh:
		}
	}
}
