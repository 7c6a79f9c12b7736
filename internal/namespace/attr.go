package namespace

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// update applies fn to the inode at path and stores it.
func (ns *Namespace) update(c Caller, op, path string, fn func(n *Inode) error) error {
	return ns.mutate(op, func(tx *txn) error {
		p, n, _, err := ns.lookup(c, op, path)
		if err != nil {
			return err
		}
		if n == nil {
			return kerr.New(kerr.NotFound, op, p, "no such file or directory")
		}
		if n.IsDir {
			// The cached container is changed in place: work on a copy and
			// install it only when fn agrees.
			d := n.clone()
			if err := fn(d); err != nil {
				return kerr.WithOp(err, op)
			}
			d.CTime = ns.opts.Now().UnixNano()
			tx.dirty = true
			*n = *d
			tx.put(inodeKey(n.ID), n.encode(nil))
		} else {
			uid, gid := n.UID, n.GID
			if err := fn(n); err != nil {
				return kerr.WithOp(err, op)
			}
			if n.UID != uid || n.GID != gid {
				ns.charge(tx, n.Parent, uid, gid, Amount{n.Size, 1}.neg())
				ns.charge(tx, n.Parent, n.UID, n.GID, Amount{n.Size, 1})
			}
			n.CTime = ns.opts.Now().UnixNano()
			putFile(tx, n)
		}
		tx.emit(Event{Kind: AttrChanged, Ino: n.ID, Parent: n.Parent, Name: n.Name, IsDir: n.IsDir})
		return nil
	})
}

// Chmod sets permission bits (owner or root).
func (ns *Namespace) Chmod(c Caller, path string, mode uint32) error {
	return ns.update(c, "chmod", path, func(n *Inode) error {
		if err := owner(c, n, path); err != nil {
			return err
		}
		n.Mode = mode & 0o7777
		return nil
	})
}

// SetMTime sets the modification time (utimensat): an explicit time
// by the owner or root, the current time (now) also by whoever may
// write it, as POSIX says. The namespace keeps no access time.
func (ns *Namespace) SetMTime(c Caller, path string, mtime int64, now bool) error {
	return ns.update(c, "utimes", path, func(n *Inode) error {
		if !now || !ns.permits(c, n, ns.dirOf(n), Write) {
			if err := owner(c, n, path); err != nil {
				return err
			}
		}
		if now {
			mtime = ns.opts.Now().UnixNano()
		}
		n.MTime = mtime
		return nil
	})
}

// Chown sets owner and group (root only). A file's quota usage moves to
// its new owner.
func (ns *Namespace) Chown(c Caller, path string, uid, gid uint32) error {
	return ns.update(c, "chown", path, func(n *Inode) error {
		// POSIX: root gives a file to anyone; its owner may only change
		// its group, to one the owner is a member of.
		if c.UID != 0 && (c.UID != n.UID || uid != n.UID || gid != n.GID && gid != c.GID && !contains(c.Groups, gid)) {
			return kerr.New(kerr.Permission, "", path, "only root may give a file away, and its owner change its group only to one of theirs")
		}
		n.UID, n.GID = uid, gid
		return nil
	})
}

// checkAttrName validates an attribute name and the caller's right to it:
// sys.* is root-only, user.* needs write permission; values are bounded.
func (ns *Namespace) checkAttrName(c Caller, n *Inode, path, name string, write bool) error {
	switch {
	case name == "" || len(name) > 255 || strings.ContainsAny(name, "\x00="):
		return kerr.New(kerr.Invalid, "", path, fmt.Sprintf("bad attribute name %q", name))
	case strings.HasPrefix(name, "sys."):
		if write && c.UID != 0 {
			return kerr.New(kerr.Permission, "", path, "sys.* attributes are root-only")
		}
	case strings.HasPrefix(name, "user."):
		if write && !ns.permits(c, n, ns.dirOf(n), Write) {
			return kerr.New(kerr.Permission, "", path, "write permission denied")
		}
	default:
		return kerr.New(kerr.Invalid, "", path, fmt.Sprintf("attribute %q must start with sys. or user.", name))
	}
	return nil
}

// SetXAttr sets an attribute. The attributes the namespace interprets
// (layout, checksums, mkpath) are validated first.
func (ns *Namespace) SetXAttr(c Caller, path, name, value string) error {
	return ns.update(c, "attr set", path, func(n *Inode) error {
		if err := ns.checkAttrName(c, n, path, name, true); err != nil {
			return err
		}
		if len(value) > 64<<10 {
			return kerr.New(kerr.Invalid, "", path, "attribute value longer than 64 KiB")
		}
		switch name {
		case nsapi.AttrLayout, nsapi.AttrConvertLayout:
			l, err := layout.Parse(value)
			if err != nil {
				return kerr.New(kerr.Invalid, "", path, err.Error())
			}
			value = l.String()
		case nsapi.AttrACL, nsapi.AttrUserACL:
			if _, err := ParseACL(value); err != nil {
				return kerr.New(kerr.Invalid, "", path, err.Error())
			}
		case nsapi.AttrSpace, nsapi.AttrConvertSpace:
			if err := CheckSpaceName(value); err != nil {
				return kerr.New(kerr.Invalid, "", path, err.Error())
			}
		case nsapi.AttrVersioning:
			if err := checkVersioning(value); err != nil {
				return kerr.New(kerr.Invalid, "", path, err.Error())
			}
		case nsapi.AttrMkPath:
			if value != "on" && value != "off" {
				return kerr.New(kerr.Invalid, "", path, nsapi.AttrMkPath+" must be on or off")
			}
		case nsapi.AttrChecksums:
			for _, s := range strings.Split(value, ",") {
				if !checksum.Valid(s) {
					return kerr.New(kerr.Invalid, "", path, fmt.Sprintf("unknown checksum %q", s))
				}
			}
		}
		if n.XAttrs == nil {
			n.XAttrs = map[string]string{}
		}
		n.XAttrs[name] = value
		return nil
	})
}

// RemoveXAttr deletes an attribute.
func (ns *Namespace) RemoveXAttr(c Caller, path, name string) error {
	return ns.update(c, "attr rm", path, func(n *Inode) error {
		if err := ns.checkAttrName(c, n, path, name, true); err != nil {
			return err
		}
		if _, ok := n.XAttrs[name]; !ok {
			return kerr.New(kerr.NotFound, "", path, fmt.Sprintf("no attribute %q", name))
		}
		delete(n.XAttrs, name)
		return nil
	})
}

// XAttrs returns all attributes of path, sorted by name.
func (ns *Namespace) XAttrs(c Caller, path string) ([][2]string, error) {
	n, err := ns.Stat(c, path)
	if err != nil {
		return nil, err
	}
	out := make([][2]string, 0, len(n.XAttrs))
	for k, v := range n.XAttrs {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out, nil
}

// AddChecksums records checksums computed after the write (on a client's
// first request for a type the upload did not compute) for committed file
// fid at data version version (they are of that content: a file updated
// meanwhile keeps none of them, Busy). Values already stored are kept:
// they came from the stream itself.
func (ns *Namespace) AddChecksums(fid, version uint64, sums map[string]string) error {
	what := "id " + strconv.FormatUint(fid, 10)
	return ns.mutate("checksum", func(tx *txn) error {
		n, err := ns.inode(fid, "checksum")
		if err != nil || n.IsDir {
			return kerr.New(kerr.NotFound, "checksum", what, "no such file (removed or replaced meanwhile)")
		}
		if n.DataVersion != version {
			return kerr.New(kerr.Busy, "checksum", n.Name, "the file was updated while its checksum was computed; ask again")
		}
		if n.Checksums == nil {
			n.Checksums = map[string]string{}
		}
		for t, s := range sums {
			if n.Checksums[t] == "" {
				n.Checksums[t] = s
			}
		}
		putFile(tx, n)
		tx.emit(Event{Kind: AttrChanged, Ino: n.ID, Parent: n.Parent, Name: n.Name})
		return nil
	})
}
