package namespace

import (
	"errors"
	pathpkg "path"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// MaxLinkHops is how many symbolic links Follow crosses before it gives
// up with kerr.Loop: Linux's limit (MAXSYMLINKS).
const MaxLinkHops = 40

// Symlink creates a symbolic link at path whose content is target, kept
// verbatim as symlink(2) does: it need not exist and is never resolved
// here. It needs what creating a file in the parent needs (write and
// search permission there) and counts as one entry of the quota (its
// bytes: the target's length). An existing entry at path is never
// replaced (Exists).
func (ns *Namespace) Symlink(c Caller, target, path string) (l *Inode, err error) {
	switch {
	case target == "":
		// symlink(2) says ENOENT; the kernel answers that itself before
		// a mount asks, and an API client is told what is wrong (400).
		return nil, kerr.New(kerr.Invalid, "symlink", path, "empty link target")
	case len(target) > nsapi.MaxPath:
		return nil, kerr.New(kerr.NameTooLong, "symlink", path, "link target longer than 4096 bytes")
	case strings.IndexByte(target, 0) >= 0:
		return nil, kerr.New(kerr.Invalid, "symlink", path, "link target holds a NUL byte")
	}
	err = ns.mutate("symlink", func(tx *txn) error {
		p, n, parent, err := ns.lookup(c, "symlink", path)
		switch {
		case err != nil:
			return err
		case p == "/" || parent == nil || n != nil:
			return kerr.New(kerr.Exists, "symlink", p, "file exists")
		}
		if err := reserved("symlink", p, parent); err != nil {
			return err
		}
		if !ns.permits(c, parent, parent, Write|Search) {
			return kerr.New(kerr.Permission, "symlink", p, "write permission denied on parent")
		}
		now := ns.opts.Now().UnixNano()
		l = &Inode{ID: ns.allocID(tx), Parent: parent.ID, Name: baseName(p), Mode: 0o777, UID: c.UID,
			GID: newGID(c, parent), CTime: now, MTime: now, BTime: now, Size: int64(len(target)), Target: target}
		err = ns.link(tx, parent, l, nil, false)
		var ke *kerr.Error
		if errors.As(err, &ke) {
			ke.Op = "symlink" // link names the upload's commit
		}
		return err
	})
	return l, err
}

// Follow resolves path as a front end that serves a link's target does,
// as the kernel resolves a path: every symbolic link on the way, the last
// component included, is replaced by its target (a relative one from the
// link's directory, an absolute one from the namespace's root; ".." in
// a target goes up from the directory reached, and never above the
// root), with search permission checked on every directory crossed, at
// most MaxLinkHops links. It returns the clean path reached and its
// inode, nil when only its last component is missing (a dangling link
// or a new name: the caller may create it). Without links it is Stat's
// lookup.
func (ns *Namespace) Follow(c Caller, path string) (string, *Inode, error) {
	p, err := nsapi.CleanPath(path)
	if err != nil {
		return "", nil, kerr.WithOp(err, "follow")
	}
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	root, err := ns.dir(RootID)
	if err != nil {
		return "", nil, kerr.Wrap(kerr.Internal, "follow", p, err)
	}
	type step struct {
		name string
		n    *Inode
	}
	var stack []step // the directories reached below the root, then the last entry
	at := func() *Inode {
		if len(stack) == 0 {
			return root
		}
		return stack[len(stack)-1].n
	}
	here := func() string {
		var b strings.Builder
		for _, s := range stack {
			b.WriteByte('/')
			b.WriteString(s.name)
		}
		if b.Len() == 0 {
			return "/"
		}
		return b.String()
	}
	todo := components(p)
	hops := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		cur := at()
		if !cur.IsDir {
			return "", nil, kerr.New(kerr.NotDir, "follow", p, here()+" is not a directory")
		}
		if !ns.permits(c, cur, cur, Search) {
			return "", nil, kerr.New(kerr.Permission, "follow", p, "search permission denied")
		}
		if len(name) > nsapi.MaxName {
			return "", nil, kerr.New(kerr.NameTooLong, "follow", p, "name longer than 255 bytes")
		}
		next, err := ns.child(cur.ID, name)
		if err != nil {
			return "", nil, kerr.Wrap(kerr.Internal, "follow", p, err)
		}
		if next == nil {
			if len(todo) == 0 {
				return pathpkg.Join(here(), name), nil, nil
			}
			return "", nil, kerr.New(kerr.NotFound, "follow", p, pathpkg.Join(here(), name)+": no such file or directory")
		}
		if !next.IsLink() {
			stack = append(stack, step{name, next})
			continue
		}
		link := pathpkg.Join(here(), name)
		if hops++; hops > MaxLinkHops {
			return "", nil, kerr.New(kerr.Loop, "follow", p, "more than 40 symbolic links to follow (a loop?), the last "+link)
		}
		if strings.HasPrefix(next.Target, "/") {
			stack = stack[:0]
		}
		todo = append(strings.Split(next.Target, "/"), todo...)
	}
	end := here()
	if len(end) > nsapi.MaxPath {
		return "", nil, kerr.New(kerr.NameTooLong, "follow", p, "the path its links lead to is longer than 4096 bytes")
	}
	return end, ns.copyOut(c, at()), nil
}

// notLink refuses to treat link n as a file with data (update, convert,
// versions): Invalid, naming it and its target.
func notLink(op, what string, n *Inode) error {
	if n.IsLink() {
		return kerr.New(kerr.Invalid, op, what, "is a symbolic link (to "+n.Target+"), not a file with data")
	}
	return nil
}
