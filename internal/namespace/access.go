package namespace

import (
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Rights a check asks for. Read, Write and Search are about n itself (a
// file's content, a directory's listing and entries); Delete is removing
// n from its directory; Update is replacing file n's content.
const (
	Search = 1 // execute, for files
	Write  = 2
	Read   = 4
	Delete = 8
	Update = 16
)

// allowed is the authorization of want on n, whose directory is dir (n
// itself for a directory): the POSIX mode bits, then the directory's
// ACLs, which add rights and deny deletion or update (ParseACL has the
// grammar). Root is never refused.
func allowed(c Caller, n, dir *Inode, want uint32) bool {
	if c.UID == 0 || c.Capability {
		return true
	}
	grant, deny := aclRights(c, dir)
	if want&deny != 0 {
		return false
	}
	// Each right asked for is granted by the mode bits or by the ACL.
	for r := uint32(1); r <= want; r <<= 1 {
		if want&r != 0 && grant&r == 0 && !modeBits(c, n, dir, r) {
			return false
		}
	}
	return true
}

// modeBits is the POSIX permission check of want on n, whose directory is
// dir (n itself when n is a directory): root may do anything; otherwise
// the owner, group or other bits must grant it. Deleting needs write and
// search on the directory; updating needs write on the file.
func modeBits(c Caller, n, dir *Inode, want uint32) bool {
	if c.UID == 0 {
		return true
	}
	if want&Delete != 0 {
		if !modeAllows(c, dir, Write|Search) {
			return false
		}
		want &^= Delete
	}
	if want&Update != 0 {
		want = want&^Update | Write
	}
	return modeAllows(c, n, want)
}

func modeAllows(c Caller, n *Inode, want uint32) bool {
	if n == nil {
		return false
	}
	mode := n.Mode
	switch {
	case c.UID == n.UID:
		mode >>= 6
	case c.GID == n.GID || contains(c.Groups, n.GID):
		mode >>= 3
	}
	return mode&want == want
}

// permits is the authorization of want on n, whose directory is dir (n
// itself for a directory). A version is read only by who may read it and
// its file.
func (ns *Namespace) permits(c Caller, n, dir *Inode, want uint32) bool {
	if !allowed(c, n, dir, want) {
		return false
	}
	if want&Read != 0 && n != nil && !n.IsDir && dir != nil && IsVersionDir(dir.Name) {
		if f, fdir := ns.fileOfVersions(dir); f != nil {
			return allowed(c, f, fdir, Read)
		}
	}
	return true
}

// fileOfVersions returns the file whose version folder is vdir, and its
// directory (nil when it is gone).
func (ns *Namespace) fileOfVersions(vdir *Inode) (f, dir *Inode) {
	if vdir.Parent == vdir.ID || ns.isBin(vdir.Parent) {
		return nil, nil
	}
	d, err := ns.dir(vdir.Parent)
	if err != nil {
		return nil, nil
	}
	f, err = ns.child(d.ID, strings.TrimPrefix(vdir.Name, VersionPrefix))
	if err != nil || f == nil || f.IsDir {
		return nil, nil
	}
	return f, d
}

// dirOf returns the directory that governs n: n itself, or its parent.
// Caller holds ns.mu.
func (ns *Namespace) dirOf(n *Inode) *Inode {
	if n.IsDir {
		return n
	}
	d, err := ns.dir(n.Parent)
	if err != nil {
		return nil
	}
	return d
}

// Permits reports whether c may access n for want (mode bits and ACLs).
func (ns *Namespace) Permits(c Caller, n *Inode, want uint32) bool {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.permits(c, n, ns.dirOf(n), want)
}

func contains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// visibleTo drops from n (a copy) what c may not see: checksums describe
// the content, so they follow the read permission like the bytes do.
func (ns *Namespace) visibleTo(c Caller, n *Inode) *Inode {
	if !n.IsDir && len(n.Checksums) > 0 && !ns.permits(c, n, ns.dirOf(n), Read) {
		n.Checksums = nil
	}
	return n
}

// owner allows what only n's owner (or root) may do.
// newGID is the group of an entry c makes in directory parent: the
// directory's when it is set-group-ID (which a new directory inherits
// too), else c's own, as POSIX file systems do.
func newGID(c Caller, parent *Inode) uint32 {
	if parent.Mode&0o2000 != 0 {
		return parent.GID
	}
	return c.GID
}

func owner(c Caller, n *Inode, p string) error {
	if c.UID != 0 && !c.Capability && c.UID != n.UID {
		return kerr.New(kerr.Permission, "", p, "only the owner may change this")
	}
	return nil
}
