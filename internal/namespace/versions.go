package namespace

// File versions, as EOS keeps them. sys.versioning=N on a directory (new
// directories below inherit it, like every sys.* attribute) keeps the
// last N contents of each file replaced in it: the commit that replaces
// file NAME (an upload, an empty create, a truncation) does not delete
// the replaced inode but moves it, in the same batch, into the container
// .sys.v#.NAME beside it, named <mtime seconds>.<fid, 8+ hex digits> as
// EOS names versions, and the oldest versions beyond N go to the deletion
// queue in that batch. A version is an ordinary file: it keeps its id,
// stripes, layout, checksums and owner, counts in its quota node and in
// the subtree accounting (versions hold data), is read by its path
// (/dir/.sys.v#.NAME/ID) by whoever may read both it and the file NAME,
// and goes with its file when the file is removed (recycled under
// sys.recycle, as EOS does), renamed or restored. Listings leave version
// folders out (a path names them); only the namespace makes entries in
// them. RestoreVersion swaps a version with the current content in one
// batch.
//
// Order: the current file's mtime is never older than any of its
// versions' (a commit and a restore set it to now), so versions sorted by
// (mtime, fid) are in the order they were replaced, oldest first.

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// VersionPrefix starts the name of a file's version folder
// (nsapi.AttrVersioning says how many versions it keeps).
const VersionPrefix = ".sys.v#."

// IsVersionDir reports whether name is the name of a version folder.
func IsVersionDir(name string) bool { return strings.HasPrefix(name, VersionPrefix) }

// VersionsPath is the path of the version folder of the file at clean
// path p.
func VersionsPath(p string) string {
	dir, name := path.Split(p)
	return dir + VersionPrefix + name
}

// checkVersioning validates a sys.versioning value.
func checkVersioning(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxVersions {
		return fmt.Errorf("%s must be a number of versions from 0 to %d, not %q", nsapi.AttrVersioning, maxVersions, v)
	}
	return nil
}

// maxVersions bounds sys.versioning, and so what one replacement purges
// of what a lowered setting leaves beyond it (purgeStep).
const maxVersions = 1000

// keepVersions is how many versions directory d keeps of each file (0:
// none).
func keepVersions(d *Inode) int {
	n, err := strconv.Atoi(d.XAttrs[nsapi.AttrVersioning])
	if err != nil || n < 0 {
		return 0
	}
	return min(n, maxVersions)
}

// versionID is the name file f has as a version.
func versionID(f *Inode) string {
	return fmt.Sprintf("%d.%08x", f.MTime/1e9, f.ID)
}

// versionsIn returns the versions in version folder vdir, oldest first.
//
// A folder's purged versions leave deletion markers in the engine's key
// range of the folder, in front of the live ones (names sort by time),
// until the engine compacts them away: a file overwritten 10 000 times
// made every commit skip 10 000 markers (1.4 ms, docs/DESIGN-NOTES.md).
// So the scan starts at the folder's floor, the lowest name it held at
// its last scan (lowered whenever a name is put in), kept in memory;
// without one (after a restart) it scans the whole folder once.
func (ns *Namespace) versionsIn(vdir *Inode) ([]*Inode, error) {
	var out []*Inode
	var derr error
	prefix := dentryPrefix(vdir.ID)
	err := ns.eng.Scan(dentryKey(vdir.ID, ns.floors[vdir.ID]), kv.PrefixEnd(prefix), func(k, v []byte) bool {
		n, err := ns.decodeDentry(vdir.ID, string(k[9:]), v)
		if err != nil {
			derr = err
			return false
		}
		if !n.IsDir {
			out = append(out, n)
		}
		return true
	})
	if err = errors.Join(err, derr); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MTime != out[j].MTime {
			return out[i].MTime < out[j].MTime
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// versionFolder returns the version folder of name in parent (nil when
// there is none).
func (ns *Namespace) versionFolder(parent *Inode, name string) (*Inode, error) {
	d, err := ns.child(parent.ID, VersionPrefix+name)
	if err != nil || d == nil || !d.IsDir {
		return nil, err
	}
	return d, nil
}

// versionPlan is what keeping one more version of name in parent
// implies: its version folder (nil: to be made) and the oldest versions
// that go to keep keep. Caller holds ns.mu.
func (ns *Namespace) versionPlan(parent *Inode, name string, keep int) (vdir *Inode, purge []*Inode, err error) {
	if vdir, err = ns.versionFolder(parent, name); err != nil {
		return nil, nil, err
	}
	if vdir == nil {
		// A file of that name (made before names were reserved) would
		// lose its entry to the folder: refuse the replacement.
		if n, err := ns.child(parent.ID, VersionPrefix+name); err != nil || n != nil {
			if err == nil {
				err = kerr.New(kerr.Exists, "", VersionPrefix+name, "a file has the name of the version folder "+nsapi.AttrVersioning+" keeps; rename it")
			}
			return nil, nil, err
		}
		return nil, nil, nil
	}
	if vdir.TreeFiles+1 <= int64(keep) { // it holds only versions: no purge
		return vdir, nil, nil
	}
	vs, err := ns.versionsIn(vdir)
	if err != nil {
		return nil, nil, err
	}
	ns.setFloor(vdir.ID, vs)
	if extra := len(vs) + 1 - keep; extra > 0 {
		purge = vs[:min(extra, ns.purgeStep())]
	}
	return vdir, purge, nil
}

// purgeStep is how many versions one mutation purges at most: a store
// that bounds its commits (etcd) cannot take every version a lowered
// sys.versioning leaves beyond it at once, so the next replacements
// purge the rest.
func (ns *Namespace) purgeStep() int {
	if l, ok := ns.eng.(kv.Limiter); ok {
		return max(l.Limits().Ops/16, 1)
	}
	return maxVersions
}

// setFloor records the lowest name of vs (all that version folder cid
// holds) as its floor. Caller holds ns.mu exclusively.
func (ns *Namespace) setFloor(cid uint64, vs []*Inode) {
	floor := ""
	for i, v := range vs {
		if i == 0 || v.Name < floor {
			floor = v.Name
		}
	}
	ns.floors[cid] = floor
}

// lowerFloor notes that name was put into version folder cid. Caller
// holds ns.mu exclusively.
func (ns *Namespace) lowerFloor(cid uint64, name string) {
	if f, ok := ns.floors[cid]; ok && name < f {
		ns.floors[cid] = name
	}
}

// makeVersionFolder creates parent's version folder for file f: owned
// by f's owner, with parent's mode bits and the attributes that decide
// access and deletion below parent (ACLs, recycling). Caller holds ns.mu.
func (ns *Namespace) makeVersionFolder(tx *txn, parent, f *Inode, now int64) (*Inode, error) {
	d := &Inode{ID: ns.allocID(tx), Parent: parent.ID, Name: VersionPrefix + f.Name, IsDir: true,
		Mode: parent.Mode, UID: f.UID, GID: f.GID, CTime: now, MTime: now, BTime: now, TreeMTime: now}
	for _, k := range []string{nsapi.AttrACL, nsapi.AttrUserACL, nsapi.AttrEvalACL, nsapi.AttrRecycle} {
		if v, ok := parent.XAttrs[k]; ok {
			if d.XAttrs == nil {
				d.XAttrs = map[string]string{}
			}
			d.XAttrs[k] = v
		}
	}
	tx.put(inodeKey(d.ID), d.encode(nil))
	tx.put(dentryKey(parent.ID, d.Name), u64([]byte{'d'}, d.ID))
	ns.cacheDir(tx, d)
	tx.emit(Event{Kind: Mkdir, Ino: d.ID, Parent: parent.ID, Name: d.Name, IsDir: true})
	return d, ns.account(tx, parent.ID, 0, 0, 1, now)
}

// chargeFiles counts files fs (sign 1) or stops counting them (-1) in
// their quota nodes.
func (ns *Namespace) chargeFiles(tx *txn, fs []*Inode, sign int64) {
	for _, f := range fs {
		ns.charge(tx, f.Parent, f.UID, f.GID, Amount{sign * f.Size, sign})
	}
}

// reserved refuses to make entry p in parent (a create, a mkdir, a
// rename's destination) where it would be a version folder or in one:
// only the namespace makes those.
func reserved(op, p string, parent *Inode) error {
	switch {
	case IsVersionDir(parent.Name):
		return kerr.New(kerr.Permission, op, p, "version folders are kept by the namespace ("+nsapi.AttrVersioning+"); nothing can be put in one")
	case IsVersionDir(baseName(p)):
		return kerr.New(kerr.Invalid, op, p, "names starting with "+VersionPrefix+" are reserved for version folders")
	}
	return nil
}

// keepVersion moves old, replaced in parent by a file now written to its
// directory entry, into the version folder vdir (made when nil) and
// drops the versions purge (their quota already freed). The entry is
// the new file's: it is not deleted. Caller holds ns.mu and accounts for
// the replacement in parent.
func (ns *Namespace) keepVersion(tx *txn, parent, vdir, old *Inode, purge []*Inode, now int64) error {
	if vdir == nil {
		var err error
		if vdir, err = ns.makeVersionFolder(tx, parent, old, now); err != nil {
			return err
		}
	}
	size, files := old.Size, int64(1)
	for _, v := range purge {
		ns.dropFile(tx, vdir, v)
		size, files = size-v.Size, files-1
	}
	from := old.Name
	old.Parent, old.Name = vdir.ID, versionID(old)
	ns.lowerFloor(vdir.ID, old.Name)
	putFile(tx, old)
	tx.put(inodeKey(old.ID), fileIndex(vdir.ID, old.Name))
	tx.emit(Event{Kind: Renamed, Ino: old.ID, Parent: vdir.ID, Name: old.Name, From: parent.ID, FromName: from})
	ns.touch(tx, vdir, now)
	return ns.account(tx, vdir.ID, size, files, 0, now)
}

// Versions returns the versions kept of the file at path, oldest first
// (Name is the version's id). c must be allowed to read the file (or,
// when it is gone, to list its version folder).
func (ns *Namespace) Versions(c Caller, path string) ([]*Inode, error) {
	const op = "versions"
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	p, f, parent, err := ns.lookup(c, op, path)
	if err != nil {
		return nil, err
	}
	if err := versionedPath(op, p, f, parent); err != nil {
		return nil, err
	}
	vdir, err := ns.versionFolder(parent, baseName(p))
	switch {
	case err != nil:
		return nil, kerr.Wrap(kerr.Internal, op, p, err)
	case f == nil && vdir == nil:
		return nil, kerr.New(kerr.NotFound, op, p, "no such file and no versions of it")
	case f != nil && !ns.permits(c, f, parent, Read):
		return nil, kerr.New(kerr.Permission, op, p, "read permission denied on the file")
	case f == nil && !ns.permits(c, vdir, vdir, Read|Search):
		return nil, kerr.New(kerr.Permission, op, VersionsPath(p), "read permission denied")
	case vdir == nil:
		return nil, nil
	}
	vs, err := ns.versionsIn(vdir)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, op, p, err)
	}
	for i, v := range vs {
		vs[i] = ns.visibleTo(c, v)
	}
	return vs, nil
}

// baseName is the last component of clean path p.
func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// versionedPath refuses paths that cannot have versions: directories, the
// root, version folders and what is in them.
func versionedPath(op, p string, f, parent *Inode) error {
	switch {
	case parent == nil || p == "/" || (f != nil && f.IsDir):
		return kerr.New(kerr.IsDir, op, p, "is a directory; versions are kept of files")
	case f != nil && f.IsLink():
		return notLink(op, p, f)
	case IsVersionDir(parent.Name) || IsVersionDir(baseName(p)):
		return kerr.New(kerr.Invalid, op, p, "is in a version folder; name the file the versions are of")
	}
	return nil
}

// RestoreVersion makes version id of the file at path its content again,
// in one batch: the current content becomes a version (named as an
// overwrite names it), the chosen version takes the file's place with
// its mtime set to now, and the oldest versions beyond the directory's
// sys.versioning are purged; the content just replaced is always kept,
// even where versioning is off now. c needs what an overwrite needs
// (update of the file, write on its directory) and read of the version.
func (ns *Namespace) RestoreVersion(c Caller, path, id string) (restored *Inode, err error) {
	const op = "restore-version"
	err = ns.mutate(op, func(tx *txn) error {
		p, cur, parent, err := ns.lookup(c, op, path)
		if err != nil {
			return err
		}
		if err := versionedPath(op, p, cur, parent); err != nil {
			return err
		}
		name := baseName(p)
		vdir, err := ns.versionFolder(parent, name)
		if err != nil {
			return kerr.Wrap(kerr.Internal, op, p, err)
		}
		var v *Inode
		if vdir != nil && id != "" && !strings.ContainsAny(id, "/\x00") {
			if v, err = ns.child(vdir.ID, id); err != nil {
				return kerr.Wrap(kerr.Internal, op, p, err)
			}
		}
		switch {
		case v == nil || v.IsDir:
			return kerr.New(kerr.NotFound, op, p, fmt.Sprintf("no version %q of this file (kaon file versions %s lists them)", id, p))
		case !ns.permits(c, parent, parent, Write|Search):
			return kerr.New(kerr.Permission, op, p, "write permission denied on parent")
		case cur != nil && !ns.permits(c, cur, parent, Update):
			return kerr.New(kerr.Permission, op, p, "permission to replace the file denied")
		case !ns.permits(c, v, vdir, Read):
			return kerr.New(kerr.Permission, op, p, "read permission denied on version "+id)
		}
		vs, err := ns.versionsIn(vdir)
		if err != nil {
			return kerr.Wrap(kerr.Internal, op, p, err)
		}
		ns.setFloor(vdir.ID, vs)
		// After the swap the folder holds vs without v, and cur (the newest).
		var left []*Inode
		for _, o := range vs {
			if o.ID != v.ID {
				left = append(left, o)
			}
		}
		keep, n := max(keepVersions(parent), 1), len(left)
		if cur != nil {
			n++
		}
		var purge []*Inode
		if n > keep {
			purge = left[:min(n-keep, len(left), ns.purgeStep())]
		}
		ns.chargeFiles(tx, purge, -1)
		now := ns.opts.Now().UnixNano()
		vsize, vfiles := -v.Size, int64(-1) // what vdir's subtree gains
		for _, o := range purge {
			ns.dropFile(tx, vdir, o)
			vsize, vfiles = vsize-o.Size, vfiles-1
		}
		tx.del(dentryKey(vdir.ID, v.Name))
		if cur != nil {
			cur.Parent, cur.Name = vdir.ID, versionID(cur)
			ns.lowerFloor(vdir.ID, cur.Name)
			putFile(tx, cur)
			tx.put(inodeKey(cur.ID), fileIndex(vdir.ID, cur.Name))
			tx.emit(Event{Kind: Renamed, Ino: cur.ID, Parent: vdir.ID, Name: cur.Name, From: parent.ID, FromName: name})
			vsize, vfiles = vsize+cur.Size, vfiles+1
		}
		ev := Event{Kind: Renamed, Ino: v.ID, Parent: parent.ID, Name: name, From: vdir.ID, FromName: v.Name}
		v.Parent, v.Name, v.MTime, v.CTime = parent.ID, name, now, now
		putFile(tx, v)
		tx.put(inodeKey(v.ID), fileIndex(parent.ID, name))
		tx.emit(ev)
		ns.touch(tx, vdir, now)
		ns.touch(tx, parent, now)
		if err := ns.account(tx, vdir.ID, vsize, vfiles, 0, now); err != nil {
			return kerr.Wrap(kerr.Internal, op, p, err)
		}
		// parent's own entries: v in, cur out (the folder's change is above).
		pfiles, psize := int64(1), v.Size
		if cur != nil {
			pfiles, psize = 0, v.Size-cur.Size
		}
		if err := ns.account(tx, parent.ID, psize, pfiles, 0, now); err != nil {
			return kerr.Wrap(kerr.Internal, op, p, err)
		}
		restored = ns.copyOut(c, v.clone())
		return nil
	})
	return restored, err
}

// removeVersions removes the version folder of file name in parent, as
// the removal of the file does (into the recycle bin when recycle is
// set, p being the file's path), and returns the subtree totals it took
// from parent. Caller holds ns.mu and accounts for them.
func (ns *Namespace) removeVersions(tx *txn, c Caller, parent *Inode, name, p string, recycle bool) (size, files, dirs int64, err error) {
	vdir, err := ns.versionFolder(parent, name)
	if err != nil || vdir == nil {
		return 0, 0, 0, err
	}
	size, files, dirs = vdir.TreeSize, vdir.TreeFiles, vdir.TreeDirs+1
	delete(ns.floors, vdir.ID)
	if recycle {
		err = ns.recycle(tx, c, parent, vdir, VersionsPath(p))
	} else {
		// The file's removal was authorized; its versions go with it.
		err = ns.removeTree(Root, tx, parent, vdir)
	}
	return size, files, dirs, err
}

// emptyVersionsInSteps removes the versions of the file at path in
// mutations of at most a quarter of what the store takes in one commit,
// while they are more than that, before Remove unlinks the file (and its
// then small version folder) in one. Only where the removal will delete
// them (not recycle them: the bin takes a folder whole) and c may remove
// the file.
func (ns *Namespace) emptyVersionsInSteps(c Caller, path string, o RemoveOptions) error {
	l, ok := ns.eng.(kv.Limiter)
	if !ok {
		return nil // one commit takes any folder
	}
	budget := max(l.Limits().Ops/4, 8)
	for {
		more := false
		err := ns.mutate("rm", func(tx *txn) error {
			_, n, parent, err := ns.lookup(c, "rm", path)
			if err != nil || n == nil || n.IsDir || parent == nil || (recycling(parent) && !o.NoRecycle) ||
				!ns.permits(c, n, parent, Delete) {
				return nil // Remove reports what is wrong
			}
			vdir, err := ns.versionFolder(parent, n.Name)
			if err != nil || vdir == nil || vdir.TreeFiles < int64(budget)/8 {
				return err
			}
			more = true
			_, err = ns.removeSome(Root, tx, vdir, budget, ns.opts.Now().UnixNano())
			return err
		})
		if err != nil || !more {
			return kerr.WithOp(err, "rm")
		}
	}
}

// moveVersions moves the version folder of file name in from along with
// the file, renamed to newName in to (tp its path). A version folder
// already there (of the file the rename replaces) is removed as that
// file's removal would remove it. Caller holds ns.mu.
func (ns *Namespace) moveVersions(tx *txn, c Caller, from *Inode, name string, to *Inode, newName, tp string, now int64) error {
	size, files, dirs, err := ns.removeVersions(tx, c, to, newName, tp, recycling(to))
	if err != nil {
		return kerr.Wrap(kerr.Internal, "", tp, err)
	}
	if dirs > 0 {
		if err := ns.account(tx, to.ID, -size, -files, -dirs, now); err != nil {
			return kerr.Wrap(kerr.Internal, "", tp, err)
		}
	}
	vdir, err := ns.versionFolder(from, name)
	if err != nil {
		return kerr.Wrap(kerr.Internal, "", tp, err)
	}
	if vdir == nil {
		return nil
	}
	if err := ns.moveUsage(tx, vdir, from.ID, to.ID, tp); err != nil {
		return err
	}
	tx.del(dentryKey(from.ID, vdir.Name))
	ev := Event{Kind: Renamed, Ino: vdir.ID, Parent: to.ID, Name: VersionPrefix + newName, IsDir: true, From: from.ID, FromName: vdir.Name}
	ns.uncacheDir(tx, vdir)
	vdir.Parent, vdir.Name, vdir.CTime = to.ID, ev.Name, now
	ns.cacheDir(tx, vdir)
	tx.put(inodeKey(vdir.ID), vdir.encode(nil))
	tx.put(dentryKey(to.ID, vdir.Name), u64([]byte{'d'}, vdir.ID))
	tx.emit(ev)
	size, files, dirs = vdir.TreeSize, vdir.TreeFiles, vdir.TreeDirs+1
	if err := ns.account(tx, from.ID, -size, -files, -dirs, now); err != nil {
		return kerr.Wrap(kerr.Internal, "", tp, err)
	}
	if err := ns.account(tx, to.ID, size, files, dirs, now); err != nil {
		return kerr.Wrap(kerr.Internal, "", tp, err)
	}
	return nil
}
