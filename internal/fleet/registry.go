// Package fleet is the namespace service's view of the storage servers
// and their filesystems (EOS: the MGM's FsView): the registry of
// filesystems, which heartbeats keep current, spaces and scheduling
// groups, placement of new files and slow-disk detection. Registrations
// are namespace records (Store); the rest is what heartbeats report.
//
// `fs config` and `group set` are tables of keys (FsKey, GroupKey): the
// registry has its own and every subsystem that keeps a setting in a
// filesystem's or a group's record (drain, balance, fsck) registers its
// keys, so the registry knows none of theirs.
//
// Files: registry.go (this), spaces.go, placement.go, slow.go.
package fleet

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// FsState is a filesystem as operators see it in `fs ls`: its
// registration and what its storage server last reported.
type FsState struct {
	namespace.Filesystem
	Addr       string // storage server data endpoint
	BootStatus string // booted, down, offline
	Capacity   uint64
	Used       uint64
	Files      int64
	Health     string // "ok" or the reason it is not
	LastBeat   time.Time
	// What its storage server found it to be (message.FsReport): kind
	// (posix, cephfs, rados), the backing storage it shares with other
	// filesystems, the write mode in use, what is at its place, and the
	// storage system's own health.
	Kind          string
	Backend       string
	IOInUse       string
	FsType        string
	BackendHealth string
	// Latency of its storage server's I/O on it, and why it is slow ("":
	// it is not) since when (slow.go).
	Latency   *message.Latency
	Slow      string
	SlowSince time.Time
	// DownSince is when it stopped being readable (its storage server
	// stopped reporting, or reports it offline), zero while it is;
	// DownWhy says which (List fills both).
	DownSince time.Time
	DownWhy   string

	offlineSince time.Time // first report of it offline in a row
}

// BackendID names the storage f's capacity belongs to: filesystems with
// the same one share it.
func (f *FsState) BackendID() string {
	if f.Backend != "" {
		return f.Backend
	}
	return fmt.Sprintf("fs:%d", f.ID)
}

type node struct {
	addr, xrd string
	lastBeat  time.Time
	release   string
	io        message.NodeIO // as last reported
	rates     NodeRates      // between its last two reports
}

// NodeRates are a storage server's I/O rates (per second) between its
// last two heartbeats.
type NodeRates struct{ Read, Write, Ops float64 }

// NodeState is a storage server as `node ls` shows it.
type NodeState struct {
	Node
	Alive       bool
	LastBeat    time.Time
	Release     string
	Filesystems int // registered on it
	Booted      int // of which booted
	Rates       NodeRates
}

// Node is a storage server, as clients reach it.
type Node struct {
	Name   string // node name in the registry
	HTTP   string // data endpoint base URL (http://host:port)
	XRootD string // root:// host:port, "" if none
}

// Store keeps the registrations: filesystems, defined spaces and groups
// with settings (namespace.Namespace implements it).
type Store interface {
	Filesystems() ([]namespace.Filesystem, error)
	SaveFilesystem(namespace.Filesystem) error
	Spaces() ([]namespace.Space, error)
	SaveSpace(namespace.Space) error
	Groups() ([]namespace.Group, error)
	SaveGroup(namespace.Group) error
}

// Config configures the registry.
type Config struct {
	Interval time.Duration // how often storage servers report
	Slow     SlowPolicy    // slow-disk detection (slow.go)
	Log      *slog.Logger
}

// Registry tracks storage servers and their filesystems. It is safe for
// concurrent use.
type Registry struct {
	ns       Store
	interval time.Duration
	slow     SlowPolicy
	log      *slog.Logger

	started time.Time // when this server loaded it: storage servers report within an interval

	saveMu sync.Mutex // held by whoever changes registrations (save), before mu
	mu     sync.RWMutex
	fs     map[uint32]*FsState
	nodes  map[string]*node
	spaces map[string]namespace.Space // defined ones (space define)
	groups map[string]namespace.Group // groups with settings (group set)

	avoidSlow bool       // placement skips slow filesystems
	keys      []FsKey    // of `fs config`, as the subsystems registered them
	groupKeys []GroupKey // of `group set`
}

// Drain states (namespace.Filesystem.Drain, fs ls): configstatus drain
// starts a drain, which records its end; configstatus lost starts a
// rebuild of everything the filesystem held onto the others, which
// records its end ("empty": no file has a stripe on it any more).
const (
	DrainDraining   = "draining"
	DrainDrained    = "drained"
	DrainRebuilding = "rebuilding"
	DrainEmpty      = "empty"
)

var validStatus = map[string]bool{"rw": true, "ro": true, "drain": true, "off": true, "lost": true}

// Load reads the registrations from ns.
func Load(ns Store, cfg Config) (*Registry, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Registry{ns: ns, interval: cfg.Interval, slow: cfg.Slow.resolved(), log: cfg.Log, fs: map[uint32]*FsState{}, nodes: map[string]*node{},
		spaces: map[string]namespace.Space{}, groups: map[string]namespace.Group{}, started: time.Now(),
		avoidSlow: !cfg.Slow.Off && !cfg.Slow.KeepPlacing}
	r.RegisterKeys(fsKeys...)
	fss, err := ns.Filesystems()
	if err != nil {
		return nil, err
	}
	sps, err := ns.Spaces()
	if err != nil {
		return nil, err
	}
	for _, sp := range sps {
		r.spaces[sp.Name] = sp
	}
	gs, err := ns.Groups()
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		r.groups[g.Name] = g
	}
	for _, c := range fss {
		if c.UUID == "" {
			// Registered before identities had a uuid: they were in use,
			// so they are initialized; their markers get the uuid on the
			// next heartbeat.
			c.UUID, c.Initialized = newUUID(), true
			if err := ns.SaveFilesystem(c); err != nil {
				return nil, err
			}
		}
		r.fs[c.ID] = &FsState{Filesystem: c, BootStatus: "down"}
	}
	return r, nil
}

func newUUID() string {
	var b [16]byte
	crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// save persists a changed registration of f. The caller holds r.saveMu
// and then r.mu; save lets go of r.mu while the namespace commits: a
// create holds the namespace's lock while placement reads the registry,
// so the registry's lock is never held while waiting for the
// namespace's. r.saveMu keeps registrations from changing meanwhile.
func (r *Registry) save(f *FsState, c namespace.Filesystem) error {
	r.mu.Unlock()
	err := r.ns.SaveFilesystem(c)
	r.mu.Lock()
	if err != nil {
		return err
	}
	f.Filesystem = c
	return nil
}

// addLocked registers a filesystem on a node (fs add, or first heartbeat
// with nf.Path only). A RADOS place without an object namespace
// (rados://[user@]pool[?...]) gets its own, named after the new id.
// Caller holds r.mu.
func (r *Registry) addLocked(nf NewFilesystem) (*FsState, error) {
	var id uint32 = 1
	for fid := range r.fs {
		if fid >= id {
			id = fid + 1
		}
	}
	path := withRadosNamespace(nf.Path, fmt.Sprintf("kaon-fs%d", id))
	for _, f := range r.fs {
		if f.Node == nf.Node && f.Path == path {
			return f, kerr.New(kerr.Exists, "fs add", nf.Node+":"+path, fmt.Sprintf("already registered as fs %d", f.ID))
		}
	}
	group := nf.Group
	if group == "" {
		group = "default.0"
		if nf.Space != "" {
			group = nf.Space + ".0"
		}
	}
	f := &FsState{BootStatus: "down"}
	c := namespace.Filesystem{ID: id, Node: nf.Node, Path: path, Group: group, Space: spaceOf(group), ConfigStatus: "rw", UUID: newUUID(),
		IO: nf.IO, ObjectSize: nf.ObjectSize, Location: nf.Location}
	if err := r.save(f, c); err != nil {
		return nil, err
	}
	r.fs[id] = f
	return f, nil
}

func spaceOf(group string) string {
	space, _, _ := strings.Cut(group, ".")
	return space
}

// Heartbeat records what a storage server reports (registering the
// filesystems it reports for the first time) and returns the assignments
// of its filesystems.
func (r *Registry) Heartbeat(hb message.Heartbeat) ([]message.FsAssignment, error) {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	n := r.nodes[hb.Node]
	if n == nil {
		n = &node{}
		r.nodes[hb.Node] = n
	}
	if hb.IO != nil {
		if d := now.Sub(n.lastBeat).Seconds(); !n.lastBeat.IsZero() && d > 0 && hb.IO.Ops >= n.io.Ops {
			n.rates = NodeRates{Read: float64(hb.IO.ReadBytes-n.io.ReadBytes) / d, Write: float64(hb.IO.WriteBytes-n.io.WriteBytes) / d,
				Ops: float64(hb.IO.Ops-n.io.Ops) / d}
		}
		n.io = *hb.IO
	}
	n.addr, n.xrd, n.lastBeat, n.release = hb.Addr, hb.XrdAddr, now, hb.Release
	for _, rep := range hb.Filesystems {
		// A filesystem is known by the id in its marker file: a storage server
		// that comes back under another name or port keeps its filesystems.
		f := r.fs[rep.ID]
		if f != nil && f.Path == rep.Path && f.Node != hb.Node {
			c := f.Filesystem
			c.Node = hb.Node
			if err := r.save(f, c); err != nil {
				return nil, err
			}
		}
		if f == nil || f.Node != hb.Node || f.Path != rep.Path {
			f = nil
			for _, g := range r.fs {
				if g.Node == hb.Node && g.Path == rep.Path {
					f = g
				}
			}
		}
		if f == nil {
			var err error
			if f, err = r.addLocked(NewFilesystem{Node: hb.Node, Path: rep.Path}); err != nil {
				return nil, err
			}
		}
		f.Capacity, f.Used, f.Files, f.Health, f.LastBeat = rep.Capacity, rep.Used, rep.Files, rep.Health, now
		f.Kind, f.Backend, f.IOInUse, f.FsType, f.BackendHealth = rep.Kind, rep.Backend, rep.IO, rep.FsType, rep.BackendHealth
		f.Latency = rep.Latency
		f.BootStatus = "booted"
		if rep.Offline != "" {
			f.BootStatus = "offline"
			if f.offlineSince.IsZero() {
				f.offlineSince = now
			}
		} else {
			f.offlineSince = time.Time{}
			if rep.ID == f.ID && !f.Initialized {
				c := f.Filesystem
				c.Initialized = true
				if err := r.save(f, c); err != nil {
					return nil, err
				}
			}
		}
		f.Addr = hb.Addr
	}
	var out []message.FsAssignment
	for _, f := range r.fs {
		if f.Node == hb.Node {
			sp := r.spaces[f.Space]
			a := message.FsAssignment{ID: f.ID, Path: f.Path, UUID: f.UUID, ConfigStatus: f.ConfigStatus, Init: !f.Initialized,
				IO: f.IO, CephPool: sp.CephPool, ObjectSize: sp.ObjectSize, NoBlockSums: f.NoBlockSums}
			if f.ObjectSize > 0 {
				a.ObjectSize = f.ObjectSize
			}
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// recent reports whether a report at t is recent enough to go by.
func (r *Registry) recent(t time.Time) bool { return time.Since(t) < 3*r.interval+2*time.Second }

// nodeAlive reports whether node name has beaten recently; caller holds r.mu.
func (r *Registry) nodeAlive(name string) bool {
	n := r.nodes[name]
	return n != nil && r.recent(n.lastBeat)
}

// alive reports whether f is usable: its node beats, still reports it,
// and it is booted. Caller holds r.mu.
func (r *Registry) alive(f *FsState) bool {
	return r.nodeAlive(f.Node) && r.recent(f.LastBeat) && f.BootStatus == "booted"
}

// down says since when f has not been readable and why (zero: it is
// readable). A filesystem not reported since this server started counts
// from then: the grace before a rebuild starts again with every
// namespace server. Caller holds r.mu.
func (r *Registry) down(f *FsState) (time.Time, string) {
	switch {
	case f.LastBeat.IsZero():
		return r.started, fmt.Sprintf("its storage server (node %s) has not reported it since the namespace server started", f.Node)
	case !r.nodeAlive(f.Node):
		return f.LastBeat, fmt.Sprintf("its storage server (node %s) stopped reporting", f.Node)
	case !r.recent(f.LastBeat):
		return f.LastBeat, fmt.Sprintf("its storage server (node %s) no longer reports it", f.Node)
	case f.BootStatus == "offline":
		return f.offlineSince, f.Health
	}
	return time.Time{}, ""
}

// reportWindow is how long after its start a namespace server expects
// registered storage servers to report.
const reportWindow = 10 * time.Second

// awaiting reports whether storage servers may still be about to report:
// this server started less than reportWindow ago (a restart, or a standby
// that just took over: storage servers still talking to a frozen one move
// on after their attempt timeout) and some registered node has not
// reported to it yet. Caller holds r.mu.
func (r *Registry) awaiting() bool {
	if time.Since(r.started) >= max(reportWindow, 3*r.interval) {
		return false
	}
	for _, f := range r.fs {
		if _, ok := r.nodes[f.Node]; !ok {
			return true
		}
	}
	return false
}

// List returns every filesystem as `fs ls` shows it, by id: down unless
// its node beats.
func (r *Registry) List() []FsState {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]FsState, 0, len(r.fs))
	for _, f := range r.fs {
		s := *f
		if !r.nodeAlive(f.Node) || !r.recent(f.LastBeat) || (f.BootStatus != "booted" && f.BootStatus != "offline") {
			s.BootStatus = "down"
		}
		s.DownSince, s.DownWhy = r.down(f)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Nodes returns the storage servers that reported to this server or
// hold registered filesystems, by name.
func (r *Registry) Nodes() []NodeState {
	r.mu.RLock()
	defer r.mu.RUnlock()
	byName := map[string]*NodeState{}
	get := func(name string) *NodeState {
		st := byName[name]
		if st == nil {
			st = &NodeState{Node: r.nodeOf(name), Alive: r.nodeAlive(name)}
			if n := r.nodes[name]; n != nil {
				st.LastBeat, st.Release, st.Rates = n.lastBeat, n.release, n.rates
			}
			byName[name] = st
		}
		return st
	}
	for name := range r.nodes {
		get(name)
	}
	for _, f := range r.fs {
		st := get(f.Node)
		st.Filesystems++
		if st.Alive && f.BootStatus == "booted" {
			st.Booted++
		}
	}
	out := make([]NodeState, 0, len(byName))
	for _, st := range byName {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Settings are the registry's operator settings (kaon config save):
// defined spaces, groups with settings, and the filesystems'
// registrations.
type Settings struct {
	Spaces      []namespace.Space      `json:"spaces,omitempty"`
	Groups      []namespace.Group      `json:"groups,omitempty"`
	Filesystems []namespace.Filesystem `json:"filesystems,omitempty"`
}

// Settings returns the current settings.
func (r *Registry) Settings() Settings {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var s Settings
	for _, sp := range r.spaces {
		s.Spaces = append(s.Spaces, sp)
	}
	for _, g := range r.groups {
		s.Groups = append(s.Groups, g)
	}
	for _, f := range r.fs {
		s.Filesystems = append(s.Filesystems, f.Filesystem)
	}
	slices.SortFunc(s.Spaces, func(a, b namespace.Space) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Groups, func(a, b namespace.Group) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Filesystems, func(a, b namespace.Filesystem) int { return int(a.ID) - int(b.ID) })
	return s
}

// Restore applies saved settings (kaon config load): the spaces and
// groups saved are written as saved (others are left as they are); each
// saved filesystem still registered under its id (and on the same node
// and path) gets back the operator's settings: group, configstatus, io,
// object size, drain and fsck settings. A configstatus that changes does
// as fs config's: drain starts a fresh drain, anything else ends one. It
// returns the saved filesystems it could not restore, with why.
func (r *Registry) Restore(s Settings) (skipped []string, err error) {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	for _, sp := range s.Spaces {
		if err := r.ns.SaveSpace(sp); err != nil {
			return skipped, err
		}
		r.mu.Lock()
		r.spaces[sp.Name] = sp
		r.mu.Unlock()
	}
	for _, g := range s.Groups {
		if err := r.ns.SaveGroup(g); err != nil {
			return skipped, err
		}
		r.mu.Lock()
		r.groups[g.Name] = g
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, saved := range s.Filesystems {
		f := r.fs[saved.ID]
		if f == nil || f.Node != saved.Node || f.Path != saved.Path {
			skipped = append(skipped, fmt.Sprintf("fs %d (%s:%s): not registered any more", saved.ID, saved.Node, saved.Path))
			continue
		}
		c := f.Filesystem
		if c.ConfigStatus != saved.ConfigStatus {
			c.Drain = ""
			if saved.ConfigStatus == "drain" {
				c.Drain = DrainDraining
			}
		}
		c.Group, c.Space, c.ConfigStatus, c.IO, c.ObjectSize = saved.Group, saved.Space, saved.ConfigStatus, saved.IO, saved.ObjectSize
		c.NoBlockSums = saved.NoBlockSums
		c.DrainRate, c.DrainParallel, c.Fsck = saved.DrainRate, saved.DrainParallel, saved.Fsck
		if c == f.Filesystem {
			continue
		}
		if err := r.save(f, c); err != nil {
			return skipped, err
		}
	}
	return skipped, nil
}

// FsKey is one key of `fs config`: Set checks value and applies it to
// the registration c, or says why not. Each subsystem registers its own
// (the registry's below, drain's drain.*, fsck's scan settings).
type FsKey struct {
	Name string
	Set  func(c *namespace.Filesystem, value string) error
}

// RegisterKeys adds keys to those `fs config` takes (listed in the order
// registered when a key is unknown). Call it before the registry is used.
func (r *Registry) RegisterKeys(keys ...FsKey) { r.keys = append(r.keys, keys...) }

// fsKeys are the registry's own keys of `fs config`.
var fsKeys = []FsKey{
	{Name: "configstatus", Set: func(c *namespace.Filesystem, v string) error {
		if !validStatus[v] {
			return errors.New("configstatus must be rw, ro, drain, off or lost")
		}
		c.Drain, c.LostWhy, c.LostAt = "", "", time.Time{}
		switch v {
		case "drain":
			c.Drain = DrainDraining // again if it was drained: a fresh pass
		case "lost":
			c.Drain, c.LostWhy, c.LostAt = DrainRebuilding, "declared lost by the operator (fs config)", time.Now()
		}
		c.ConfigStatus = v
		return nil
	}},
	{Name: "location", Set: func(c *namespace.Filesystem, v string) error {
		if err := CheckLocation(v); err != nil {
			return err
		}
		c.Location = v
		return nil
	}},
	{Name: "group", Set: func(c *namespace.Filesystem, v string) error {
		if err := checkGroup(v); err != nil {
			return err
		}
		c.Group, c.Space = v, spaceOf(v)
		return nil
	}},
	{Name: "space", Set: func(c *namespace.Filesystem, v string) error {
		if err := namespace.CheckSpaceName(v); err != nil {
			return err
		}
		c.Group, c.Space = v+".0", v
		return nil
	}},
	{Name: "io", Set: func(c *namespace.Filesystem, v string) error {
		if !validIO[v] {
			return errors.New("io must be auto, direct or buffered")
		}
		c.IO = v
		return nil
	}},
	{Name: "blocksums", Set: func(c *namespace.Filesystem, v string) error {
		if v != "on" && v != "off" {
			return errors.New("blocksums must be on or off")
		}
		c.NoBlockSums = v == "off"
		return nil
	}},
	{Name: "object-size", Set: func(c *namespace.Filesystem, v string) (err error) {
		c.ObjectSize, err = nsapi.ParseSize(v)
		return err
	}},
}

// Config sets key of fs id (`fs config`) with the registered key's Set.
func (r *Registry) Config(id uint32, key, value string) error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	what := fmt.Sprintf("fs %d", id)
	f := r.fs[id]
	if f == nil {
		return kerr.New(kerr.NotFound, "fs config", what, "no such filesystem")
	}
	i := slices.IndexFunc(r.keys, func(k FsKey) bool { return k.Name == key })
	if i < 0 {
		names := make([]string, len(r.keys))
		for j, k := range r.keys {
			names[j] = k.Name
		}
		return kerr.New(kerr.Invalid, "fs config", what, fmt.Sprintf("unknown key %q (%s)", key, strings.Join(names, ", ")))
	}
	c := f.Filesystem
	if err := r.keys[i].Set(&c, value); err != nil {
		return kerr.New(kerr.Invalid, "fs config", what, err.Error())
	}
	return r.save(f, c)
}

// Reinit makes the storage server initialize filesystem id again (a new
// root and identity marker, on an empty directory only): the operator's
// way to replace a lost disk by a fresh one.
func (r *Registry) Reinit(id uint32) error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.fs[id]
	if f == nil {
		return kerr.New(kerr.NotFound, "fs reinit", fmt.Sprintf("fs %d", id), "no such filesystem")
	}
	c := f.Filesystem
	c.Initialized = false
	return r.save(f, c)
}

// Readable reports whether fs id can serve reads, and its node.
func (r *Registry) Readable(id uint32) (Node, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	f := r.fs[id]
	if f == nil || f.ConfigStatus == "off" || !r.alive(f) {
		return Node{}, false
	}
	return r.nodeOf(f.Node), true
}

// lateGrace is how long after its last heartbeat a filesystem still
// serves reads that no live replica can: a storage server whose reports
// are late (a loaded host, a long pause) is out of placement at once but
// is tried for reads a while longer rather than refusing them.
const lateGrace = 30 * time.Second

// ReadableLate reports whether fs id, though its reports are late, was
// readable less than lateGrace ago, and its node.
func (r *Registry) ReadableLate(id uint32) (Node, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	f := r.fs[id]
	if f == nil || f.ConfigStatus == "off" || !r.lateAlive(f) {
		return Node{}, false
	}
	return r.nodeOf(f.Node), true
}

// lateAlive is alive with lateGrace for the reports' age. Caller holds
// r.mu.
func (r *Registry) lateAlive(f *FsState) bool {
	n := r.nodes[f.Node]
	return n != nil && time.Since(n.lastBeat) < lateGrace && time.Since(f.LastBeat) < lateGrace && f.BootStatus == "booted"
}

// nodeOf describes node name; caller holds r.mu.
func (r *Registry) nodeOf(name string) Node {
	if n := r.nodes[name]; n != nil {
		return Node{Name: name, HTTP: n.addr, XRootD: n.xrd}
	}
	return Node{Name: name}
}

// Node is the storage server holding fs id.
func (r *Registry) Node(id uint32) Node {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if f := r.fs[id]; f != nil {
		return r.nodeOf(f.Node)
	}
	return Node{}
}

// Filesystem returns fs id's registration.
func (r *Registry) Filesystem(id uint32) (namespace.Filesystem, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if f := r.fs[id]; f != nil {
		return f.Filesystem, true
	}
	return namespace.Filesystem{}, false
}

// AnyNode returns some live storage server (zero if none).
func (r *Registry) AnyNode() Node {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, f := range r.fs {
		if r.alive(f) {
			return r.nodeOf(f.Node)
		}
	}
	return Node{}
}

// Interval is how often storage servers report.
func (r *Registry) Interval() time.Duration { return r.interval }

// AvoidSlow says whether placement (and the movers' choice of targets)
// skips slow filesystems.
func (r *Registry) AvoidSlow() bool { return r.avoidSlow }

// MarkDrained records that fs id is drained, if it is still draining,
// or, for a lost one, that its rebuild ended (it is empty); done is
// false when it no longer drains or rebuilds (nothing to record).
func (r *Registry) MarkDrained(id uint32) (done bool, err error) {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.fs[id]
	if f == nil {
		return false, nil
	}
	c := f.Filesystem
	switch {
	case c.ConfigStatus == "drain" && c.Drain == DrainDraining:
		c.Drain = DrainDrained
	case c.ConfigStatus == "lost" && c.Drain == DrainRebuilding:
		c.Drain = DrainEmpty
	default:
		return false, nil
	}
	return true, r.save(f, c)
}

// MarkLost declares fs id lost (configstatus lost) for the reason why,
// which starts the rebuild of everything it held onto the others of its
// group, if it is still in the state the caller saw (configstatus was,
// and it is still down); done is false when not.
func (r *Registry) MarkLost(id uint32, was, why string) (done bool, err error) {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.fs[id]
	if f == nil || f.ConfigStatus != was {
		return false, nil
	}
	if since, _ := r.down(f); since.IsZero() {
		return false, nil // back meanwhile
	}
	c := f.Filesystem
	c.ConfigStatus, c.Drain, c.LostWhy, c.LostAt = "lost", DrainRebuilding, why, time.Now()
	return true, r.save(f, c)
}
