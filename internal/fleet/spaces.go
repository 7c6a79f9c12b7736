package fleet

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Spaces and the settings of filesystems. A space is a set of
// filesystems (groups SPACE.N) files are placed on; a directory chooses
// one with sys.forced.space, "default" otherwise. A space exists once a
// filesystem is in it or it is defined (space define); its settings (the
// CephFS layout of its filesystems) travel to the storage servers with
// each filesystem's assignment.

// DefaultSpace is where files go whose directory names no space.
const DefaultSpace = "default"

// NewFilesystem is what `fs add` registers.
type NewFilesystem struct {
	Node string
	// Path is the filesystem's place on the node: a directory, or
	// rados://[USER@]POOL[/NAMESPACE][?conf=FILE] for objects in a RADOS
	// pool (a namespace of its own is made up when none is given).
	Path       string
	Group      string // scheduling group SPACE.N (default SPACE.0)
	Space      string // default "default", or the group's
	IO         string // auto (""), direct, buffered
	ObjectSize int64  // RADOS object size (0: the space's or the store's)
	Location   string // failure-domain tag, "site::rack1" ("": none)
}

var validIO = map[string]bool{"auto": true, "direct": true, "buffered": true}

func checkGroup(g string) error {
	space, idx, ok := strings.Cut(g, ".")
	if err := namespace.CheckSpaceName(space); err != nil {
		return fmt.Errorf("bad group %q: %v", g, err)
	}
	if _, err := strconv.ParseUint(idx, 10, 32); ok && err != nil {
		return fmt.Errorf("bad group %q: want SPACE.N", g)
	}
	return nil
}

// isRados says whether a filesystem path names a RADOS pool.
func isRados(path string) bool { return strings.HasPrefix(path, "rados://") }

// withRadosNamespace gives a RADOS place without an object namespace
// the namespace ns; other paths are returned as they are.
func withRadosNamespace(path, ns string) string {
	if !isRados(path) {
		return path
	}
	u, err := url.Parse(path)
	if err != nil || strings.Trim(u.Path, "/") != "" {
		return path
	}
	u.Path = "/" + ns
	return u.String()
}

// checkPath validates the place of a new filesystem.
func checkPath(p string) error {
	if !isRados(p) {
		if p == "" || p[0] != '/' {
			return fmt.Errorf("need an absolute path or rados://[USER@]POOL[/NAMESPACE][?conf=FILE]")
		}
		return nil
	}
	u, err := url.Parse(p)
	if err != nil {
		return fmt.Errorf("bad RADOS place: %v", err)
	}
	if u.Host == "" {
		return fmt.Errorf("bad RADOS place %q: no pool (rados://[USER@]POOL[/NAMESPACE][?conf=FILE])", p)
	}
	for k := range u.Query() {
		if k != "conf" {
			return fmt.Errorf("bad RADOS place %q: unknown parameter %q (conf)", p, k)
		}
	}
	return nil
}

// SpaceExists reports whether space name is defined or has filesystems.
func (r *Registry) SpaceExists(name string) bool {
	if name == DefaultSpace {
		return true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if _, ok := r.spaces[name]; ok {
		return true
	}
	for _, f := range r.fs {
		if f.Space == name {
			return true
		}
	}
	return false
}

// Add registers a new filesystem on a storage server node (`fs add`).
func (r *Registry) Add(nf NewFilesystem) (FsState, error) {
	what := nf.Node + ":" + nf.Path
	if nf.Node == "" {
		return FsState{}, kerr.New(kerr.Invalid, "fs add", what, "need a node")
	}
	if err := checkPath(nf.Path); err != nil {
		return FsState{}, kerr.New(kerr.Invalid, "fs add", what, err.Error())
	}
	if nf.Group != "" {
		if err := checkGroup(nf.Group); err != nil {
			return FsState{}, kerr.New(kerr.Invalid, "fs add", nf.Group, err.Error())
		}
		if nf.Space != "" && spaceOf(nf.Group) != nf.Space {
			return FsState{}, kerr.New(kerr.Invalid, "fs add", nf.Group, "group is not in space "+nf.Space)
		}
	}
	if nf.Space != "" {
		if err := namespace.CheckSpaceName(nf.Space); err != nil {
			return FsState{}, kerr.New(kerr.Invalid, "fs add", what, err.Error())
		}
	}
	if nf.IO != "" && !validIO[nf.IO] {
		return FsState{}, kerr.New(kerr.Invalid, "fs add", what, "io must be auto, direct or buffered")
	}
	if err := CheckLocation(nf.Location); err != nil {
		return FsState{}, kerr.New(kerr.Invalid, "fs add", what, err.Error())
	}
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.nodes[nf.Node]; !ok {
		return FsState{}, kerr.New(kerr.NotFound, "fs add", nf.Node, "no storage server with that node name has registered")
	}
	added, err := r.addLocked(nf)
	if err != nil {
		return FsState{}, err
	}
	return *added, nil
}

// DefineSpace defines a space (`space define NAME`); defining one that
// exists is not an error.
func (r *Registry) DefineSpace(name string) error {
	if err := namespace.CheckSpaceName(name); err != nil {
		return kerr.New(kerr.Invalid, "space define", name, err.Error())
	}
	r.saveMu.Lock() // not mu: see save
	defer r.saveMu.Unlock()
	r.mu.RLock()
	sp, ok := r.spaces[name]
	r.mu.RUnlock()
	if ok {
		return nil
	}
	sp.Name = name
	err := r.ns.SaveSpace(sp)
	if err == nil {
		r.mu.Lock()
		r.spaces[name] = sp
		r.mu.Unlock()
	}
	return err
}

// ConfigSpace sets a space's key (`space config NAME key=value`):
// cephfs.pool (the CephFS data pool of its filesystems' roots, "" to
// leave it) or cephfs.object-size (their layout's object size, e.g.
// 16M). The space is defined if it was not.
func (r *Registry) ConfigSpace(name, key, value string) error {
	if err := namespace.CheckSpaceName(name); err != nil {
		return kerr.New(kerr.Invalid, "space config", name, err.Error())
	}
	r.saveMu.Lock() // not mu: see save
	defer r.saveMu.Unlock()
	r.mu.RLock()
	sp := r.spaces[name]
	r.mu.RUnlock()
	sp.Name = name
	switch key {
	case "cephfs.pool":
		if strings.ContainsAny(value, " \t\n=/") {
			return kerr.New(kerr.Invalid, "space config", name, fmt.Sprintf("bad pool name %q", value))
		}
		sp.CephPool = value
	case "cephfs.object-size":
		n, err := nsapi.ParseSize(value)
		if err == nil && n > 0 && n%(64<<10) != 0 {
			err = fmt.Errorf("object size %d is not a multiple of 64 KiB (CephFS needs that)", n)
		}
		if err != nil {
			return kerr.New(kerr.Invalid, "space config", name, err.Error())
		}
		sp.ObjectSize = n
	default:
		return kerr.New(kerr.Invalid, "space config", name, fmt.Sprintf("unknown key %q (cephfs.pool, cephfs.object-size)", key))
	}
	err := r.ns.SaveSpace(sp)
	if err == nil {
		r.mu.Lock()
		r.spaces[name] = sp
		r.mu.Unlock()
	}
	return err
}

// SpaceState summarizes a space for `space ls`. Filesystems that share a
// backend (directories of one disk or one CephFS, namespaces of one RADOS
// pool) count their capacity and usage once.
type SpaceState struct {
	Name        string
	Groups      int
	Filesystems int
	RW          int
	Booted      int
	Capacity    uint64
	Used        uint64
	Files       int64
	Backends    int    // distinct backends its filesystems are on
	CephPool    string // settings (space config)
	ObjectSize  int64
}

// Spaces aggregates the registry per space, defined ones included.
func (r *Registry) Spaces() []SpaceState {
	m := map[string]*SpaceState{}
	groups := map[string]map[string]bool{}
	backends := map[string]map[string]bool{}
	get := func(name string) *SpaceState {
		sp := m[name]
		if sp == nil {
			sp = &SpaceState{Name: name}
			m[name] = sp
			groups[name], backends[name] = map[string]bool{}, map[string]bool{}
		}
		return sp
	}
	r.mu.RLock()
	for name, def := range r.spaces {
		sp := get(name)
		sp.CephPool, sp.ObjectSize = def.CephPool, def.ObjectSize
	}
	r.mu.RUnlock()
	for _, f := range r.List() {
		sp := get(f.Space)
		groups[f.Space][f.Group] = true
		sp.Filesystems++
		if f.ConfigStatus == "rw" {
			sp.RW++
		}
		if f.BootStatus == "booted" {
			sp.Booted++
		}
		sp.Files += f.Files
		if b := f.BackendID(); !backends[f.Space][b] && f.BootStatus == "booted" {
			backends[f.Space][b] = true
			sp.Capacity += f.Capacity
			sp.Used += f.Used
		}
	}
	out := make([]SpaceState, 0, len(m))
	for name, sp := range m {
		sp.Groups, sp.Backends = len(groups[name]), len(backends[name])
		out = append(out, *sp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
