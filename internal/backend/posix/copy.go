package posix

// In-kernel copies for the update path: a journal's operations are
// copied from the update session's spool, and its writes into the
// stripe, with copy_file_range (no pass through user space; on
// filesystems that share extents, no copy at all), falling back to
// reads and writes of 1 MiB when the kernel refuses it (files on two
// filesystems, an old kernel).

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copyBufSize is the buffer of the fallback copy.
const copyBufSize = 1 << 20

// copyRange copies n bytes of src at soff to dst at doff.
func copyRange(dst *os.File, doff int64, src *os.File, soff, n int64) error {
	for n > 0 {
		c, err := unix.CopyFileRange(int(src.Fd()), &soff, int(dst.Fd()), &doff, int(min(n, 1<<30)), 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) ||
				errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM) {
				return copyRangeSlow(dst, doff, src, soff, n)
			}
			return &os.PathError{Op: "copy_file_range", Path: dst.Name(), Err: err}
		}
		if c == 0 {
			return io.ErrUnexpectedEOF // src is shorter than it says
		}
		n -= int64(c) // the offsets moved with the copy
	}
	return nil
}

// copyRangeSlow is copyRange through user space.
func copyRangeSlow(dst *os.File, doff int64, src *os.File, soff, n int64) error {
	buf := make([]byte, min(n, copyBufSize))
	for n > 0 {
		p := buf[:min(n, int64(len(buf)))]
		if _, err := src.ReadAt(p, soff); err != nil {
			return err
		}
		if _, err := dst.WriteAt(p, doff); err != nil {
			return err
		}
		soff, doff, n = soff+int64(len(p)), doff+int64(len(p)), n-int64(len(p))
	}
	return nil
}
