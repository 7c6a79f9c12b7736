package namespace

import (
	"errors"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// resolve walks a clean path checking search permission on every container
// crossed. It returns the inode (nil when the last component is missing)
// and its parent container. Caller holds ns.mu (either mode).
func (ns *Namespace) resolve(c Caller, op, p string) (n, parent *Inode, err error) {
	cur, err := ns.dir(RootID)
	if err != nil {
		return nil, nil, kerr.Wrap(kerr.Internal, op, p, err)
	}
	names := components(p)
	if len(names) == 0 {
		return cur, cur, nil
	}
	for i, name := range names {
		if !cur.IsDir {
			return nil, nil, kerr.New(kerr.NotDir, op, p, "a path component is not a directory")
		}
		if !ns.permits(c, cur, cur, Search) {
			return nil, nil, kerr.New(kerr.Permission, op, p, "search permission denied")
		}
		next, err := ns.child(cur.ID, name)
		if err != nil {
			return nil, nil, kerr.Wrap(kerr.Internal, op, p, err)
		}
		if next == nil {
			if i == len(names)-1 {
				return nil, cur, nil
			}
			return nil, nil, kerr.New(kerr.NotFound, op, p, "no such file or directory")
		}
		parent, cur = cur, next
	}
	return cur, parent, nil
}

// lookup cleans path and resolves it.
func (ns *Namespace) lookup(c Caller, op, path string) (string, *Inode, *Inode, error) {
	p, err := nsapi.CleanPath(path)
	if err != nil {
		return "", nil, nil, kerr.WithOp(err, op)
	}
	n, parent, err := ns.resolve(c, op, p)
	return p, n, parent, err
}

// copyOut returns what a caller may keep of n: a copy (cached containers
// are shared), without what c may not see.
func (ns *Namespace) copyOut(c Caller, n *Inode) *Inode {
	if n.IsDir {
		return n.clone()
	}
	return ns.visibleTo(c, n) // files are freshly decoded, not shared
}

// Stat returns a copy of the inode at path.
func (ns *Namespace) Stat(c Caller, path string) (*Inode, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	_, n, _, err := ns.lookup(c, "stat", path)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, kerr.New(kerr.NotFound, "stat", path, "no such file or directory")
	}
	return ns.copyOut(c, n), nil
}

// List returns the entries of the container at path, sorted by name.
func (ns *Namespace) List(c Caller, path string) ([]*Inode, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	p, d, _, err := ns.lookup(c, "list", path)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, kerr.New(kerr.NotFound, "list", p, "no such file or directory")
	}
	return ns.readDir(c, p, d)
}

func (ns *Namespace) readDir(c Caller, what string, d *Inode) ([]*Inode, error) {
	if !d.IsDir {
		return nil, kerr.New(kerr.NotDir, "list", what, "not a directory")
	}
	if !ns.permits(c, d, d, Read) {
		return nil, kerr.New(kerr.Permission, "list", what, "read permission denied")
	}
	var out []*Inode
	if err := ns.scanDir(d, func(n *Inode) {
		if !n.IsDir || !IsVersionDir(n.Name) { // a path names version folders
			out = append(out, ns.copyOut(c, n))
		}
	}); err != nil {
		return nil, kerr.Wrap(kerr.Internal, "list", what, err)
	}
	return out, nil
}

// Lookup returns the entry name of container parent, checking search
// permission on parent (the inode-based form of one step of a path walk).
func (ns *Namespace) Lookup(c Caller, parent uint64, name string) (*Inode, error) {
	what := "id " + strconv.FormatUint(parent, 10) + "/" + name
	switch {
	case name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return nil, kerr.New(kerr.Invalid, "lookup", what, "bad name")
	case len(name) > nsapi.MaxName:
		return nil, kerr.New(kerr.NameTooLong, "lookup", what, "name longer than 255 bytes")
	}
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	d, err := ns.container(parent, "lookup")
	if err != nil {
		return nil, err
	}
	if !ns.permits(c, d, d, Search) {
		return nil, kerr.New(kerr.Permission, "lookup", what, "search permission denied")
	}
	n, err := ns.child(parent, name)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, "lookup", what, err)
	}
	if n == nil {
		return nil, kerr.New(kerr.NotFound, "lookup", what, "no such file or directory")
	}
	return ns.copyOut(c, n), nil
}

// ReadDir returns the entries of container ino with their attributes.
func (ns *Namespace) ReadDir(c Caller, ino uint64) ([]*Inode, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	d, err := ns.container(ino, "list")
	if err != nil {
		return nil, err
	}
	return ns.readDir(c, "id "+strconv.FormatUint(ino, 10), d)
}

// container returns container id (NotFound / NotDir otherwise).
func (ns *Namespace) container(id uint64, op string) (*Inode, error) {
	n, err := ns.inode(id, op)
	if err != nil {
		return nil, err
	}
	if !n.IsDir {
		return nil, kerr.New(kerr.NotDir, op, "id "+strconv.FormatUint(id, 10), "not a directory")
	}
	return n, nil
}

// inode returns the inode with id, a container (cached) or a file.
func (ns *Namespace) inode(id uint64, op string) (*Inode, error) {
	what := "id " + strconv.FormatUint(id, 10)
	if d, ok := ns.cached(id); ok {
		return d, nil
	}
	v, err := ns.eng.Get(inodeKey(id))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, kerr.New(kerr.NotFound, op, what, "no such inode")
	}
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, op, what, err)
	}
	if parent, name, isFile := parseFileIndex(v); isFile {
		n, err := ns.child(parent, name)
		if err != nil || n == nil {
			return nil, kerr.New(kerr.Internal, op, what, "dangling file index")
		}
		return n, nil
	}
	n, err := ns.dir(id)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, op, what, err)
	}
	return n, nil
}

// GetAttr returns the inode with id. Like a file handle it needs no
// search permission on the path to it; content-derived attributes still
// follow the read permission.
func (ns *Namespace) GetAttr(c Caller, id uint64) (*Inode, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	n, err := ns.inode(id, "getattr")
	if err != nil {
		return nil, err
	}
	return ns.copyOut(c, n), nil
}

// ByID returns the inode with id and its path (for trusted services).
func (ns *Namespace) ByID(id uint64) (*Inode, string, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	n, err := ns.inode(id, "lookup")
	if err != nil {
		return nil, "", err
	}
	p, err := ns.pathOf(n)
	return n.clone(), p, err
}

func (ns *Namespace) pathOf(n *Inode) (string, error) {
	if n.ID == RootID {
		return "/", nil
	}
	parts := []string{n.Name}
	for cid := n.Parent; cid != RootID; {
		d, err := ns.dir(cid)
		if err != nil {
			return "", err
		}
		parts = append(parts, d.Name)
		if d.Parent == d.ID { // the recycle bin: its own parent
			break
		}
		cid = d.Parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return "/" + strings.Join(parts, "/"), nil
}
