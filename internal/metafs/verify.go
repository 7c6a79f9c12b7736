package metafs

import (
	"bytes"
	"fmt"
	"strings"
)

// Diff is one difference between an index and the live tree.
type Diff struct {
	Path   string // relative to the root ("" = root)
	Kind   string // "added", "removed", "changed", "order"
	Detail string
}

func (d Diff) String() string {
	p := d.Path
	if p == "" {
		p = "."
	}
	if d.Detail != "" {
		return fmt.Sprintf("%-8s %s (%s)", d.Kind, p, d.Detail)
	}
	return fmt.Sprintf("%-8s %s", d.Kind, p)
}

// Compare reports every difference between old (e.g. a loaded index) and
// cur (e.g. a fresh Build of the tree). Access times are ignored: reading
// data through the mount legitimately moves them.
func Compare(old, cur *Index) []Diff {
	var out []Diff
	var walk func(a, b int)
	walk = func(a, b int) {
		if d := attrDiff(old, a, cur, b); d != "" {
			out = append(out, Diff{Path: cur.Path(b), Kind: "changed", Detail: d})
		}
		if !old.IsDir(a) || !cur.IsDir(b) {
			return
		}
		af, an := old.Children(a)
		bf, bn := cur.Children(b)
		sameOrder, changed := true, false
		for k := 0; k < an; k++ {
			c := af + k
			nc, ok := cur.Lookup(b, old.Name(c))
			if !ok {
				out = append(out, Diff{Path: old.Path(c), Kind: "removed"})
				changed = true
				continue
			}
			if nc != bf+k {
				sameOrder = false
			}
			walk(c, nc)
		}
		for k := 0; k < bn; k++ {
			c := bf + k
			if _, ok := old.Lookup(a, cur.Name(c)); !ok {
				out = append(out, Diff{Path: cur.Path(c), Kind: "added"})
				changed = true
			}
		}
		if !sameOrder && !changed {
			out = append(out, Diff{Path: cur.Path(b), Kind: "order", Detail: "listing order changed"})
		}
	}
	walk(0, 0)
	return out
}

func attrDiff(x *Index, i int, y *Index, j int) string {
	a, b := x.Attr(i), y.Attr(j)
	var d []string
	if a.Mode&0o170000 != b.Mode&0o170000 {
		d = append(d, fmt.Sprintf("type %o->%o", a.Mode&0o170000, b.Mode&0o170000))
	} else if a.Mode != b.Mode {
		d = append(d, fmt.Sprintf("mode %o->%o", a.Mode&0o7777, b.Mode&0o7777))
	}
	if a.Uid != b.Uid || a.Gid != b.Gid {
		d = append(d, fmt.Sprintf("owner %d:%d->%d:%d", a.Uid, a.Gid, b.Uid, b.Gid))
	}
	if a.Size != b.Size {
		d = append(d, fmt.Sprintf("size %d->%d", a.Size, b.Size))
	}
	if a.Mtime != b.Mtime {
		d = append(d, "mtime")
	}
	if a.Ctime != b.Ctime {
		d = append(d, "ctime")
	}
	if a.Nlink != b.Nlink {
		d = append(d, fmt.Sprintf("nlink %d->%d", a.Nlink, b.Nlink))
	}
	if a.Ino != b.Ino {
		d = append(d, "inode")
	}
	if a.Rdev != b.Rdev {
		d = append(d, "rdev")
	}
	if !bytes.Equal(x.Readlink(i), y.Readlink(j)) {
		d = append(d, fmt.Sprintf("target %q->%q", x.Readlink(i), y.Readlink(j)))
	}
	if xattrString(x, i) != xattrString(y, j) {
		d = append(d, "xattrs")
	}
	return strings.Join(d, ", ")
}

func xattrString(x *Index, i int) string {
	var sb strings.Builder
	x.Xattrs(i, func(n string, v []byte) bool {
		sb.WriteString(n)
		sb.WriteByte(0)
		sb.Write(v)
		sb.WriteByte(0)
		return true
	})
	return sb.String()
}
