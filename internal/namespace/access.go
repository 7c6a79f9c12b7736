package namespace

import "github.com/kaon-storage/kaon/internal/kerr"

// Permission bits a check asks for.
const (
	Read   = 4
	Write  = 2
	Search = 1 // execute, for files
)

// ModeBits is the POSIX permission check: root may do anything; otherwise
// the owner, group or other bits of n's mode must grant all of want.
func ModeBits(c Caller, n *Inode, want uint32) bool {
	if c.UID == 0 {
		return true
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

// permits asks the configured authorization.
func (ns *Namespace) permits(c Caller, n *Inode, want uint32) bool {
	return ns.opts.Permits(c, n, want)
}

// Permits reports whether c may access n for want under this namespace's
// authorization.
func (ns *Namespace) Permits(c Caller, n *Inode, want uint32) bool { return ns.permits(c, n, want) }

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
	if !n.IsDir && len(n.Checksums) > 0 && !ns.permits(c, n, Read) {
		n.Checksums = nil
	}
	return n
}

// owner allows what only n's owner (or root) may do.
func owner(c Caller, n *Inode, p string) error {
	if c.UID != 0 && c.UID != n.UID {
		return kerr.New(kerr.Permission, "", p, "only the owner may change this")
	}
	return nil
}
