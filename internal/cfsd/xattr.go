package cfsd

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kaon-storage/kaon/internal/fusecore"
	"golang.org/x/sys/unix"
)

// xattrCache remembers a node's attribute names (one llistxattr) for the
// attribute timeout, so the questions the kernel and tools ask about
// every file — security.capability on write and chown, security.selinux
// and system.posix_acl_access from `ls -l` — are answered ENODATA without
// touching the backend. Values are still read from the backend. Changes
// made through the mount invalidate it; changes made behind its back are
// seen after the timeout, like attributes.
const selinuxXattr = "security.selinux"

// selinuxHost reports whether SELinux is active on this host (its file
// system is mounted at /sys/fs/selinux).
var selinuxHost = func() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/selinux", &st) == nil && st.Type == unix.SELINUX_MAGIC
}()

// backendPath is a node's /proc/self/fd path (see node.procPath).
type backendPath struct {
	p string
	// follow: p is a directory's own fd link, which must be followed;
	// otherwise p is parent/name and a symlink there is the object
	// itself (the l* calls).
	follow bool
}

func (b backendPath) getxattr(attr string, dest []byte) (int, error) {
	if b.follow {
		return unix.Getxattr(b.p, attr, dest)
	}
	return unix.Lgetxattr(b.p, attr, dest)
}

func (b backendPath) setxattr(attr string, data []byte, flags int) error {
	if b.follow {
		return unix.Setxattr(b.p, attr, data, flags)
	}
	return unix.Lsetxattr(b.p, attr, data, flags)
}

func (b backendPath) listxattr(dest []byte) (int, error) {
	if b.follow {
		return unix.Listxattr(b.p, dest)
	}
	return unix.Llistxattr(b.p, dest)
}

func (b backendPath) removexattr(attr string) error {
	if b.follow {
		return unix.Removexattr(b.p, attr)
	}
	return unix.Lremovexattr(b.p, attr)
}

type xattrCache struct {
	mu    sync.Mutex
	names map[string]bool
	until time.Time
}

func (c *xattrCache) invalidate() {
	c.mu.Lock()
	c.names = nil
	c.mu.Unlock()
}

// absent reports whether attr is known not to exist on the node at
// path p (loading the name list if needed).
func (c *xattrCache) absent(p backendPath, attr string, ttl time.Duration) bool {
	if ttl <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.names == nil || now.After(c.until) {
		names, ok := listNames(p)
		if !ok {
			c.names = nil
			return false
		}
		c.names, c.until = names, now.Add(ttl)
	}
	return !c.names[attr]
}

func listNames(p backendPath) (map[string]bool, bool) {
	buf := make([]byte, 1024)
	for {
		n, err := p.listxattr(buf)
		if err == syscall.ERANGE {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, false
		}
		m := map[string]bool{}
		for _, b := range bytes.Split(buf[:n], []byte{0}) {
			if len(b) > 0 {
				m[string(b)] = true
			}
		}
		return m, true
	}
}

func isACLXattr(name string) bool { return strings.HasPrefix(name, "system.posix_acl_") }

// listNoACL is listxattr without the POSIX ACL names.
func listNoACL(ctx context.Context, p backendPath, dest []byte) (uint32, syscall.Errno) {
	buf := make([]byte, 1024)
	var k int
	var err error
	cr := fusecore.Enter(caller(ctx))
	for {
		k, err = p.listxattr(buf)
		if err != syscall.ERANGE {
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	cr.Leave()
	if err != nil {
		return 0, errnoOf(err)
	}
	var out []byte
	for _, b := range bytes.Split(buf[:k], []byte{0}) {
		if len(b) > 0 && !isACLXattr(string(b)) {
			out = append(append(out, b...), 0)
		}
	}
	if len(dest) == 0 {
		return uint32(len(out)), 0
	}
	if len(dest) < len(out) {
		return uint32(len(out)), syscall.ERANGE
	}
	return uint32(copy(dest, out)), 0
}
