package cfsd

import (
	"io"
	"os"
	"path/filepath"

	"github.com/kaon-storage/kaon/internal/kerr"
	"golang.org/x/sys/unix"
)

// stateDir is the state directory (quota.json, recycle.*), reached only
// through a descriptor opened before the mount exists. The daemon never
// resolves a path once mounted: a path may lead through its own mount
// (a state dir inside the mountpoint, a backend mounted over itself),
// and a file of its own mount still open when the daemon dies makes the
// exiting process wait forever for its own answer to FLUSH.
type stateDir struct {
	fd   int
	path string // for messages
}

// openStateDir creates (0700) and opens the state directory.
func openStateDir(path string) (stateDir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return stateDir{fd: -1}, kerr.Wrap(kerr.KindOf(err), "cfsd state", path, err)
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return stateDir{fd: -1}, kerr.Wrap(kerr.KindOf(err), "cfsd state", path, err)
	}
	return stateDir{fd: fd, path: path}, nil
}

func (d stateDir) name(n string) string { return filepath.Join(d.path, n) }

// open opens name in the directory (flags as for os.OpenFile).
func (d stateDir) open(n string, flags int) (*os.File, error) {
	fd, err := unix.Openat(d.fd, n, flags|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.name(n), Err: err}
	}
	return os.NewFile(uintptr(fd), d.name(n)), nil
}

// readFile returns the content of name; os.IsNotExist tells an absent
// file.
func (d stateDir) readFile(n string) ([]byte, error) {
	f, err := d.open(n, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// writeFile replaces name atomically (write to name.tmp, rename).
func (d stateDir) writeFile(n string, data []byte) error {
	tmp := n + ".tmp"
	f, err := d.open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = unix.Renameat(d.fd, tmp, d.fd, n); err != nil {
			err = &os.PathError{Op: "rename", Path: d.name(n), Err: err}
		}
	}
	if err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
	}
	return err
}

func (d stateDir) close() {
	if d.fd >= 0 {
		unix.Close(d.fd)
	}
}
