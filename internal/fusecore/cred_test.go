package fusecore

import (
	"os"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

func TestParseGroups(t *testing.T) {
	st := []byte("Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGroups:\t1000 27 2000 \nNgid:\t0\n")
	g := parseGroups(st, 1000)
	if len(g) != 3 || g[0] != 1000 || g[1] != 27 || g[2] != 2000 {
		t.Errorf("groups %v", g)
	}
	if g := parseGroups([]byte("Groups:\t\n"), 5); len(g) != 1 || g[0] != 5 {
		t.Errorf("empty groups -> %v", g)
	}
}

// TestEnterSwitchesThreadCredentials: with root, Enter makes files
// created on this thread belong to the caller, and Leave restores root.
func TestEnterSwitchesThreadCredentials(t *testing.T) {
	if !isRoot {
		t.Skip("needs root")
	}
	dir, err := os.MkdirTemp("", "fusecore-cred")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	c := &fuse.Caller{Owner: fuse.Owner{Uid: 1234, Gid: 4321}}
	cr := Enter(c)
	fd, err := syscall.Open(dir+"/f", syscall.O_CREAT|syscall.O_WRONLY, 0o644)
	cr.Leave()
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	var st syscall.Stat_t
	syscall.Stat(dir+"/f", &st)
	if st.Uid != 1234 || st.Gid != 4321 {
		t.Errorf("owner %d:%d", st.Uid, st.Gid)
	}
	// Back to root: may create in a 0700 root-owned dir.
	os.Chmod(dir, 0o700)
	if fd, err := syscall.Open(dir+"/g", syscall.O_CREAT|syscall.O_WRONLY, 0o644); err != nil {
		t.Errorf("after Leave: %v", err)
	} else {
		syscall.Close(fd)
	}
	// As the caller the 0700 dir is closed.
	cr = Enter(c)
	_, err = syscall.Open(dir+"/h", syscall.O_CREAT|syscall.O_WRONLY, 0o644)
	cr.Leave()
	if err != syscall.EACCES {
		t.Errorf("as caller in 0700 root dir: %v, want EACCES", err)
	}
}
