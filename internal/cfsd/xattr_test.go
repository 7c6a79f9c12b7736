package cfsd

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestListNoACL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(p, "user.a", []byte("1"), 0); err != nil {
		t.Skipf("no user xattrs here: %v", err)
	}
	acl := []byte{2, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255, 4, 0, 4, 0, 255, 255, 255, 255, 32, 0, 4, 0, 255, 255, 255, 255}
	hasACL := unix.Lsetxattr(p, "system.posix_acl_access", acl, 0) == nil
	ctx := context.Background()
	sz, errno := listNoACL(ctx, backendPath{p: p}, nil)
	if errno != 0 || sz != uint32(len("user.a\x00")) {
		t.Fatalf("size query: %d %v (backend ACL set: %v)", sz, errno, hasACL)
	}
	if _, errno := listNoACL(ctx, backendPath{p: p}, make([]byte, 3)); errno != syscall.ERANGE {
		t.Errorf("short buffer: %v, want ERANGE", errno)
	}
	buf := make([]byte, 64)
	sz, errno = listNoACL(ctx, backendPath{p: p}, buf)
	if errno != 0 || string(buf[:sz]) != "user.a\x00" {
		t.Errorf("list = %q %v", buf[:sz], errno)
	}
	for name, want := range map[string]bool{"system.posix_acl_access": true, "system.posix_acl_default": true, "user.posix_acl_access": false, "security.selinux": false} {
		if isACLXattr(name) != want {
			t.Errorf("isACLXattr(%q) = %v", name, !want)
		}
	}
}
