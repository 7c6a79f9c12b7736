package mgm

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/layout"
)

// FsConfig is the persistent part of a filesystem registration ("F" keys).
type FsConfig struct {
	ID           uint32 `json:"id"`
	Node         string `json:"node"`
	Path         string `json:"path"`
	Group        string `json:"group"`
	Space        string `json:"space"`
	ConfigStatus string `json:"configstatus"`
	// UUID is written into the filesystem's identity marker, so a disk of
	// another filesystem or instance is never taken for this one.
	UUID string `json:"uuid,omitempty"`
	// Initialized is set once the storage server has reported the
	// filesystem with its marker; after that it is never created again
	// implicitly (fs reinit clears it).
	Initialized bool `json:"initialized,omitempty"`
}

// FsState is a filesystem as operators see it in `fs ls`.
type FsState struct {
	FsConfig
	Addr       string    `json:"addr"`
	BootStatus string    `json:"bootstatus"` // booted, down
	Capacity   uint64    `json:"capacity"`
	Used       uint64    `json:"used"`
	Files      int64     `json:"files"`
	Health     string    `json:"health"`
	LastBeat   time.Time `json:"lastbeat"`
}

type node struct {
	addr, xrd string
	lastBeat  time.Time
}

// registry tracks storage servers and their filesystems.
type registry struct {
	eng      kv.Engine
	interval time.Duration

	mu    sync.RWMutex
	fs    map[uint32]*FsState
	nodes map[string]*node
}

var validStatus = map[string]bool{"rw": true, "ro": true, "drain": true, "off": true}

func fsKey(id uint32) []byte { return binary.BigEndian.AppendUint32([]byte{'F'}, id) }

func loadRegistry(eng kv.Engine, interval time.Duration) (*registry, error) {
	r := &registry{eng: eng, interval: interval, fs: map[uint32]*FsState{}, nodes: map[string]*node{}}
	var old []FsConfig
	err := eng.Scan([]byte{'F'}, []byte{'G'}, func(_, v []byte) bool {
		var c FsConfig
		if json.Unmarshal(v, &c) == nil {
			r.fs[c.ID] = &FsState{FsConfig: c, BootStatus: "down"}
			if c.UUID == "" {
				old = append(old, c)
			}
		}
		return true
	})
	// Registered before identities had a uuid: they were in use, so they
	// are initialized; their markers get the uuid on the next heartbeat.
	for _, c := range old {
		c.UUID, c.Initialized = newUUID(), true
		if err := r.save(c); err != nil {
			return nil, err
		}
		r.fs[c.ID].FsConfig = c
	}
	return r, err
}

func newUUID() string {
	var b [16]byte
	crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func (r *registry) save(c FsConfig) error {
	v, _ := json.Marshal(c)
	b := r.eng.NewBatch()
	b.Put(fsKey(c.ID), v)
	return b.Commit(true)
}

// add registers a filesystem path on a node (fs add, or first heartbeat).
func (r *registry) addLocked(nodeName, path, group string) (*FsState, error) {
	for _, f := range r.fs {
		if f.Node == nodeName && f.Path == path {
			return f, kerr.New(kerr.Exists, "fs add", nodeName+":"+path, fmt.Sprintf("already registered as fs %d", f.ID))
		}
	}
	var id uint32 = 1
	for fid := range r.fs {
		if fid >= id {
			id = fid + 1
		}
	}
	if group == "" {
		group = "default.0"
	}
	c := FsConfig{ID: id, Node: nodeName, Path: path, Group: group, Space: spaceOf(group), ConfigStatus: "rw", UUID: newUUID()}
	if err := r.save(c); err != nil {
		return nil, err
	}
	f := &FsState{FsConfig: c, BootStatus: "down"}
	r.fs[id] = f
	return f, nil
}

func spaceOf(group string) string {
	space, _, _ := strings.Cut(group, ".")
	return space
}

func (r *registry) heartbeat(hb cluster.Heartbeat) ([]cluster.FsAssignment, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	n := r.nodes[hb.Node]
	if n == nil {
		n = &node{}
		r.nodes[hb.Node] = n
	}
	n.addr, n.xrd, n.lastBeat = hb.Addr, hb.XrdAddr, now
	for _, rep := range hb.Filesystems {
		// A filesystem is known by the id in its marker file: a storage server
		// that comes back under another name or port keeps its filesystems.
		f := r.fs[rep.ID]
		if f != nil && f.Path == rep.Path && f.Node != hb.Node {
			f.Node = hb.Node
			if err := r.save(f.FsConfig); err != nil {
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
			if f, err = r.addLocked(hb.Node, rep.Path, ""); err != nil {
				return nil, err
			}
		}
		f.Capacity, f.Used, f.Files, f.Health, f.LastBeat = rep.Capacity, rep.Used, rep.Files, rep.Health, now
		f.BootStatus = "booted"
		if rep.Offline != "" {
			f.BootStatus = "offline"
		} else if rep.ID == f.ID && !f.Initialized {
			c := f.FsConfig
			c.Initialized = true
			if err := r.save(c); err != nil {
				return nil, err
			}
			f.FsConfig = c
		}
		f.Addr = hb.Addr
	}
	var out []cluster.FsAssignment
	for _, f := range r.fs {
		if f.Node == hb.Node {
			out = append(out, cluster.FsAssignment{ID: f.ID, Path: f.Path, UUID: f.UUID, ConfigStatus: f.ConfigStatus, Init: !f.Initialized})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// alive reports whether f's node has beaten recently; caller holds r.mu.
func (r *registry) alive(f *FsState) bool {
	n := r.nodes[f.Node]
	return n != nil && time.Since(n.lastBeat) < 3*r.interval+2*time.Second && f.BootStatus == "booted"
}

// reinit makes the storage server initialize filesystem id again (a new
// root and identity marker, on an empty directory only): the operator's
// way to replace a lost disk by a fresh one.
func (r *registry) reinit(id uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.fs[id]
	if f == nil {
		return kerr.New(kerr.NotFound, "fs reinit", fmt.Sprintf("fs %d", id), "no such filesystem")
	}
	c := f.FsConfig
	c.Initialized = false
	if err := r.save(c); err != nil {
		return err
	}
	f.FsConfig = c
	return nil
}

func (r *registry) list() []FsState {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]FsState, 0, len(r.fs))
	for _, f := range r.fs {
		s := *f
		if n := r.nodes[f.Node]; !r.alive(f) && (f.BootStatus != "offline" || n == nil || time.Since(n.lastBeat) >= 3*r.interval+2*time.Second) {
			s.BootStatus = "down"
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (r *registry) config(id uint32, key, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	what := fmt.Sprintf("fs %d", id)
	f := r.fs[id]
	if f == nil {
		return kerr.New(kerr.NotFound, "fs config", what, "no such filesystem")
	}
	c := f.FsConfig
	switch key {
	case "configstatus":
		if !validStatus[value] {
			return kerr.New(kerr.Invalid, "fs config", what, "configstatus must be rw, ro, drain or off")
		}
		c.ConfigStatus = value
	case "group":
		if value == "" {
			return kerr.New(kerr.Invalid, "fs config", what, "empty group")
		}
		c.Group, c.Space = value, spaceOf(value)
	default:
		return kerr.New(kerr.Invalid, "fs config", what, fmt.Sprintf("unknown key %q (configstatus, group)", key))
	}
	if err := r.save(c); err != nil {
		return err
	}
	f.FsConfig = c
	return nil
}

// place picks one writable filesystem per stripe, never two on one
// filesystem, spreading over nodes first, weighted towards free space.
func (r *registry) place(l layout.Layout) ([]uint32, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var cands []*FsState
	for _, f := range r.fs {
		if f.ConfigStatus == "rw" && f.Health == "ok" && r.alive(f) && f.Space == "default" {
			cands = append(cands, f)
		}
	}
	need := l.Stripes()
	if len(cands) < need {
		return nil, kerr.New(kerr.NoSpace, "", "", fmt.Sprintf("layout %s needs %d writable filesystems, %d available", l, need, len(cands)))
	}
	// Random order biased by free space, then stable-partition by how many
	// stripes each node already holds.
	key := make(map[uint32]float64, len(cands))
	for _, f := range cands {
		free := float64(f.Capacity-f.Used) + 1
		key[f.ID] = rand.Float64() * free
	}
	sort.Slice(cands, func(i, j int) bool { return key[cands[i].ID] > key[cands[j].ID] })
	perNode := map[string]int{}
	out := make([]uint32, 0, need)
	for round := 0; len(out) < need; round++ {
		for _, f := range cands {
			if len(out) == need {
				break
			}
			if perNode[f.Node] == round && !containsID(out, f.ID) {
				perNode[f.Node]++
				out = append(out, f.ID)
			}
		}
	}
	return out, nil
}

func containsID(s []uint32, id uint32) bool {
	for _, x := range s {
		if x == id {
			return true
		}
	}
	return false
}

// readable reports whether fs id can serve reads and its node address.
func (r *registry) readable(id uint32) (addr string, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	f := r.fs[id]
	if f == nil || f.ConfigStatus == "off" || f.BootStatus == "offline" || !r.alive(f) {
		return "", false
	}
	return r.nodes[f.Node].addr, true
}

func (r *registry) addr(id uint32) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if f := r.fs[id]; f != nil {
		if n := r.nodes[f.Node]; n != nil {
			return n.addr
		}
	}
	return ""
}

func (r *registry) xrdAddr(httpAddr string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, n := range r.nodes {
		if n.addr == httpAddr {
			return n.xrd
		}
	}
	return ""
}

func (r *registry) path(id uint32) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if f := r.fs[id]; f != nil {
		return f.Path
	}
	return ""
}

// anyAddr returns the address of some live storage server ("" if none).
func (r *registry) anyAddr() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, f := range r.fs {
		if r.alive(f) {
			return r.nodes[f.Node].addr
		}
	}
	return ""
}
