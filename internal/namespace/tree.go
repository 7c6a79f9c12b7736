package namespace

import (
	"errors"
	pathpkg "path"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Mkdir creates a container; with parents, missing ancestors too and an
// existing container is not an error. New containers inherit the parent's
// sys.* attributes (layout policy) like EOS.
func (ns *Namespace) Mkdir(c Caller, path string, mode uint32, parents bool) error {
	p, err := nsapi.CleanPath(path)
	if err != nil {
		return kerr.WithOp(err, "mkdir")
	}
	if p == "/" {
		if parents {
			return nil
		}
		return kerr.New(kerr.Exists, "mkdir", p, "directory exists")
	}
	return ns.mutate("mkdir", func(tx *txn) error {
		cur, err := ns.dir(RootID)
		if err != nil {
			return kerr.Wrap(kerr.Internal, "mkdir", p, err)
		}
		names := components(p)
		now := ns.opts.Now().UnixNano()
		for i, name := range names {
			last := i == len(names)-1
			if !ns.permits(c, cur, cur, Search) {
				return kerr.New(kerr.Permission, "mkdir", p, "search permission denied")
			}
			next, err := ns.child(cur.ID, name)
			if err != nil {
				return kerr.Wrap(kerr.Internal, "mkdir", p, err)
			}
			if next != nil {
				if !next.IsDir {
					if last {
						return kerr.New(kerr.Exists, "mkdir", p, "a file with that name exists")
					}
					return kerr.New(kerr.NotDir, "mkdir", p, "a path component is not a directory")
				}
				if last && !parents {
					return kerr.New(kerr.Exists, "mkdir", p, "directory exists")
				}
				cur = next
				continue
			}
			if !last && !parents {
				return kerr.New(kerr.NotFound, "mkdir", p, "parent directory does not exist")
			}
			if !ns.permits(c, cur, cur, Write|Search) {
				return kerr.New(kerr.Permission, "mkdir", p, "write permission denied on parent")
			}
			if err := reserved("mkdir", "/"+strings.Join(names[:i+1], "/"), cur); err != nil {
				return err
			}
			d := &Inode{ID: ns.allocID(tx), Parent: cur.ID, Name: name, IsDir: true, Mode: mode&0o7777 | cur.Mode&0o2000,
				UID: c.UID, GID: newGID(c, cur), CTime: now, MTime: now, BTime: now, TreeMTime: now}
			for k, v := range cur.XAttrs {
				if strings.HasPrefix(k, "sys.") || k == nsapi.AttrUserACL {
					if d.XAttrs == nil {
						d.XAttrs = map[string]string{}
					}
					d.XAttrs[k] = v
				}
			}
			tx.put(inodeKey(d.ID), d.encode(nil))
			tx.put(dentryKey(cur.ID, name), u64([]byte{'d'}, d.ID))
			ns.cacheDir(tx, d)
			ns.touch(tx, cur, now)
			if err := ns.account(tx, cur.ID, 0, 0, 1, now); err != nil {
				return kerr.Wrap(kerr.Internal, "mkdir", p, err)
			}
			tx.emit(Event{Kind: Mkdir, Ino: d.ID, Parent: cur.ID, Name: name, IsDir: true})
			cur = d
		}
		return nil
	})
}

// RemoveOptions says what Remove may remove.
type RemoveOptions struct {
	Dir       bool // the path must be a directory (rmdir); otherwise a file (rm)
	Any       bool // a file or an empty directory
	Recursive bool // a file or a whole tree (WebDAV DELETE)
	NoRecycle bool // delete for good even where sys.recycle is set
}

// Remove unlinks the file or directory at path; a file's data is queued
// for deletion. On a store that bounds its commits (kv.Limiter: etcd) a
// tree too large for one commit is emptied in steps first, deepest
// entries first, each step consistent (as rm -r: not atomic as a whole).
func (ns *Namespace) Remove(c Caller, path string, o RemoveOptions) error {
	op := "rm"
	if o.Dir {
		op = "rmdir"
	}
	if o.Recursive {
		if err := ns.emptyInSteps(c, path, o); err != nil {
			return err
		}
	}
	if err := ns.emptyVersionsInSteps(c, path, o); err != nil {
		return err
	}
	return ns.mutate(op, func(tx *txn) error {
		p, n, parent, err := ns.lookup(c, op, path)
		if err != nil {
			return err
		}
		switch {
		case n == nil && o.Dir:
			return kerr.New(kerr.NotFound, op, p, "no such directory")
		case n == nil && !o.Any && !o.Recursive:
			return kerr.New(kerr.NotFound, op, p, "no such file")
		case n == nil:
			return kerr.New(kerr.NotFound, op, p, "no such file or directory")
		case n.ID == RootID:
			return kerr.New(kerr.Permission, op, p, "cannot remove the root")
		case o.Dir && !n.IsDir:
			return kerr.New(kerr.NotDir, op, p, "not a directory")
		case n.IsDir && !o.Dir && !o.Any && !o.Recursive:
			return kerr.New(kerr.IsDir, op, p, "is a directory")
		case n.IsDir && !o.Recursive && (n.TreeFiles != 0 || n.TreeDirs != 0):
			return kerr.New(kerr.NotEmpty, op, p, "directory not empty")
		case !ns.permits(c, n, parent, Delete):
			return kerr.New(kerr.Permission, op, p, "permission to delete denied")
		}
		size, files, dirs := n.Size, int64(1), int64(0)
		if n.IsDir {
			size, files, dirs = n.TreeSize, n.TreeFiles, n.TreeDirs+1
		} else {
			vs, vf, vd, err := ns.removeVersions(tx, c, parent, n.Name, p, recycling(parent) && !o.NoRecycle)
			if err != nil {
				return kerr.Wrap(kerr.Internal, op, p, err)
			}
			size, files, dirs = size+vs, files+vf, dirs+vd
		}
		switch {
		case recycling(parent) && !o.NoRecycle:
			if n.IsDir {
				if err := ns.mayDeleteTree(c, n); err != nil {
					return kerr.WithOp(err, op)
				}
			}
			if err := ns.recycle(tx, c, parent, n, p); err != nil {
				return kerr.Wrap(kerr.Internal, op, p, err)
			}
		case n.IsDir:
			if err := ns.removeTree(c, tx, parent, n); err != nil {
				return kerr.WithOp(err, op)
			}
		default:
			ns.unlinkFile(tx, parent, n)
		}
		now := ns.opts.Now().UnixNano()
		ns.touch(tx, parent, now)
		if err := ns.account(tx, parent.ID, -size, -files, -dirs, now); err != nil {
			return kerr.Wrap(kerr.Internal, op, p, err)
		}
		return nil
	})
}

func (ns *Namespace) unlinkFile(tx *txn, parent, f *Inode) {
	ns.charge(tx, parent.ID, f.UID, f.GID, Amount{f.Size, 1}.neg())
	ns.dropFile(tx, parent, f)
}

// dropFile unlinks file f of parent and queues its stripes for deletion
// (its quota already released).
func (ns *Namespace) dropFile(tx *txn, parent, f *Inode) {
	tx.del(dentryKey(parent.ID, f.Name))
	tx.del(inodeKey(f.ID))
	queueDeletion(tx, f)
	tx.emit(Event{Kind: Removed, Ino: f.ID, Parent: parent.ID, Name: f.Name})
}

func (ns *Namespace) unlinkDir(tx *txn, parent, d *Inode) {
	ns.dropQuotaNode(tx, d)
	tx.del(dentryKey(parent.ID, d.Name))
	tx.del(inodeKey(d.ID))
	ns.uncacheDir(tx, d)
	tx.emit(Event{Kind: Removed, Ino: d.ID, Parent: parent.ID, Name: d.Name, IsDir: true})
}

// mayDeleteTree checks c may delete everything below container d (what
// removeTree checks as it goes).
func (ns *Namespace) mayDeleteTree(c Caller, d *Inode) error {
	if !ns.permits(c, d, d, Delete) {
		return kerr.New(kerr.Permission, "", d.Name, "permission to delete entries denied")
	}
	var dirs []*Inode
	if err := ns.scanDir(d, func(n *Inode) {
		if n.IsDir {
			dirs = append(dirs, n)
		}
	}); err != nil {
		return kerr.Wrap(kerr.Internal, "", d.Name, err)
	}
	for _, sub := range dirs {
		if err := ns.mayDeleteTree(c, sub); err != nil {
			return err
		}
	}
	return nil
}

// removeTree unlinks container d and everything below it (the caller
// accounts for the whole subtree once).
func (ns *Namespace) removeTree(c Caller, tx *txn, parent, d *Inode) error {
	if !ns.permits(c, d, d, Delete) {
		return kerr.New(kerr.Permission, "", d.Name, "permission to delete entries denied")
	}
	var kids []*Inode
	if err := ns.scanDir(d, func(n *Inode) { kids = append(kids, n) }); err != nil {
		return kerr.Wrap(kerr.Internal, "", d.Name, err)
	}
	for _, k := range kids {
		if k.IsDir {
			if err := ns.removeTree(c, tx, d, k); err != nil {
				return err
			}
		} else {
			ns.unlinkFile(tx, d, k)
		}
	}
	ns.unlinkDir(tx, parent, d)
	return nil
}

// emptyInSteps removes what is below the container at path, in mutations
// of at most a quarter of what the store takes in one commit, while the
// tree is larger than that. Remove then unlinks it (and reports anything
// wrong with path).
func (ns *Namespace) emptyInSteps(c Caller, path string, o RemoveOptions) error {
	l, ok := ns.eng.(kv.Limiter)
	if !ok {
		return nil // one commit takes any tree
	}
	budget := max(l.Limits().Ops/4, 8)
	for {
		more := false
		err := ns.mutate("rm", func(tx *txn) error {
			_, n, parent, err := ns.lookup(c, "rm", path)
			if err != nil || n == nil || !n.IsDir || n.ID == RootID || parent == nil ||
				(recycling(parent) && !o.NoRecycle) || n.TreeFiles+n.TreeDirs < int64(budget)/8 {
				return nil // one commit: the recycle bin takes a tree whole
			}
			more = true
			_, err = ns.removeSome(c, tx, n, budget, ns.opts.Now().UnixNano())
			return kerr.WithOp(err, "rm")
		})
		if err != nil || !more {
			return err
		}
	}
}

// removeSome unlinks entries below container d, deepest first, until the
// mutation holds budget writes; it reports whether d is empty now. Caller
// holds ns.mu.
func (ns *Namespace) removeSome(c Caller, tx *txn, d *Inode, budget int, now int64) (bool, error) {
	if !ns.permits(c, d, d, Delete) {
		return false, kerr.New(kerr.Permission, "", d.Name, "permission to delete entries denied")
	}
	var kids []*Inode
	prefix := dentryPrefix(d.ID)
	var derr error
	err := ns.eng.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
		n, err := ns.decodeDentry(d.ID, string(k[9:]), v)
		if err != nil {
			derr = err
			return false
		}
		kids = append(kids, n)
		return len(kids) < budget // more than one step can use
	})
	if err = errors.Join(err, derr); err != nil {
		return false, kerr.Wrap(kerr.Internal, "", d.Name, err)
	}
	removed := 0
	for _, k := range kids {
		if tx.writes >= budget {
			break
		}
		if k.IsDir {
			empty, err := ns.removeSome(c, tx, k, budget, now)
			if err != nil {
				return false, err
			}
			if !empty || tx.writes >= budget {
				continue
			}
			ns.unlinkDir(tx, d, k)
			if err := ns.account(tx, d.ID, 0, 0, -1, now); err != nil {
				return false, err
			}
		} else {
			ns.unlinkFile(tx, d, k)
			if err := ns.account(tx, d.ID, -k.Size, -1, 0, now); err != nil {
				return false, err
			}
		}
		removed++
	}
	if removed > 0 {
		ns.touch(tx, d, now)
	}
	return d.TreeFiles == 0 && d.TreeDirs == 0, nil
}

// Rename moves from to to. A file may replace a file when overwrite is set;
// an empty container may replace an empty container. Moving a container
// into its own subtree, or a path onto itself, is refused. replaced says
// whether something was at to.
func (ns *Namespace) Rename(c Caller, from, to string, overwrite bool) (replaced bool, err error) {
	err = ns.mutate("mv", func(tx *txn) error {
		fp, n, fparent, err := ns.lookup(c, "mv", from)
		if err != nil {
			return err
		}
		tp, err := nsapi.CleanPath(to)
		if err != nil {
			return kerr.WithOp(err, "mv")
		}
		switch {
		case n == nil:
			return kerr.New(kerr.NotFound, "mv", fp, "no such file or directory")
		case n.ID == RootID:
			return kerr.New(kerr.Permission, "mv", fp, "cannot move the root")
		case fp == tp:
			return kerr.New(kerr.Invalid, "mv", fp, "source and destination are the same")
		case n.IsDir && nsapi.IsAncestor(fp, tp):
			return kerr.New(kerr.Invalid, "mv", tp, "cannot move a directory into its own subtree")
		}
		old, tparent, err := ns.resolve(c, "mv", tp)
		if err != nil {
			return err
		}
		if tp == "/" || tparent == nil || !tparent.IsDir {
			return kerr.New(kerr.NotFound, "mv", tp, "destination parent does not exist")
		}
		if n.IsDir && IsVersionDir(n.Name) {
			return kerr.New(kerr.Permission, "mv", fp, "a version folder moves with its file, not by itself")
		}
		if err := reserved("mv", tp, tparent); err != nil {
			return err
		}
		switch {
		case !ns.permits(c, n, fparent, Delete):
			return kerr.New(kerr.Permission, "mv", fp, "permission to delete denied in "+pathpkg.Dir(fp)+" (a move takes it out of there)")
		case !ns.permits(c, tparent, tparent, Write|Search):
			return kerr.New(kerr.Permission, "mv", tp, "write permission denied on the destination directory "+pathpkg.Dir(tp))
		case old != nil && !ns.permits(c, old, tparent, Delete):
			return kerr.New(kerr.Permission, "mv", tp, "permission to delete denied in "+pathpkg.Dir(tp)+" (the destination exists and would be replaced)")
		}
		if err := ns.moveUsage(tx, n, fparent.ID, tparent.ID, tp); err != nil {
			return kerr.WithOp(err, "mv")
		}
		now := ns.opts.Now().UnixNano()
		if old != nil {
			switch {
			case !overwrite:
				return kerr.New(kerr.Exists, "mv", tp, "destination exists")
			case old.IsDir != n.IsDir:
				if old.IsDir {
					return kerr.New(kerr.IsDir, "mv", tp, "destination is a directory")
				}
				return kerr.New(kerr.NotDir, "mv", tp, "destination is not a directory")
			case old.IsDir && (old.TreeFiles != 0 || old.TreeDirs != 0):
				return kerr.New(kerr.NotEmpty, "mv", tp, "destination directory not empty")
			case old.IsDir:
				ns.unlinkDir(tx, tparent, old)
				if err := ns.account(tx, tparent.ID, 0, 0, -1, now); err != nil {
					return kerr.Wrap(kerr.Internal, "mv", tp, err)
				}
			default:
				ns.unlinkFile(tx, tparent, old)
				if err := ns.account(tx, tparent.ID, -old.Size, -1, 0, now); err != nil {
					return kerr.Wrap(kerr.Internal, "mv", tp, err)
				}
			}
			replaced = true
		}
		newName := tp[strings.LastIndexByte(tp, '/')+1:]
		size, files, dirs := n.Size, int64(1), int64(0)
		tx.del(dentryKey(fparent.ID, n.Name))
		ev := Event{Kind: Renamed, Ino: n.ID, Parent: tparent.ID, Name: newName, IsDir: n.IsDir, From: fparent.ID, FromName: n.Name}
		if n.IsDir {
			size, files, dirs = n.TreeSize, n.TreeFiles, n.TreeDirs+1
			ns.uncacheDir(tx, n)
			n.Parent, n.Name, n.CTime = tparent.ID, newName, now
			ns.cacheDir(tx, n)
			tx.put(inodeKey(n.ID), n.encode(nil))
			tx.put(dentryKey(tparent.ID, newName), u64([]byte{'d'}, n.ID))
		} else {
			from := n.Name
			n.Parent, n.Name, n.CTime = tparent.ID, newName, now
			putFile(tx, n)
			tx.put(inodeKey(n.ID), fileIndex(tparent.ID, newName))
			if err := ns.moveVersions(tx, c, fparent, from, tparent, newName, tp, now); err != nil {
				return kerr.WithOp(err, "mv")
			}
		}
		tx.emit(ev)
		ns.touch(tx, fparent, now)
		if err := ns.account(tx, fparent.ID, -size, -files, -dirs, now); err != nil {
			return kerr.Wrap(kerr.Internal, "mv", fp, err)
		}
		ns.touch(tx, tparent, now)
		if err := ns.account(tx, tparent.ID, size, files, dirs, now); err != nil {
			return kerr.Wrap(kerr.Internal, "mv", tp, err)
		}
		return nil
	})
	return replaced, err
}
