package fusecore

import (
	"context"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// go-fuse's fs API drops the lock owner the kernel sends with FLUSH
// (FlushIn.LockOwner: the closing process's files table, the owner of
// its POSIX locks), yet POSIX releases a process's locks on a file at
// the close of any of its descriptors of that file. lockOwners keeps it
// where the file system finds it: by the request's cancel channel,
// which is the one go-fuse puts in the request's context and which no
// other request in flight shares.
type lockOwners struct {
	fuse.RawFileSystem
}

var flushOwners sync.Map // cancel channel -> uint64

func (w lockOwners) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	flushOwners.Store(cancel, in.LockOwner)
	defer flushOwners.Delete(cancel)
	return w.RawFileSystem.Flush(cancel, in)
}

// FlushOwner is the lock owner of the FLUSH request whose context ctx
// is (a Flush method's own, before any wrapping), false for another.
func FlushOwner(ctx context.Context) (uint64, bool) {
	c, ok := ctx.(*fuse.Context)
	if !ok || c.Cancel == nil {
		return 0, false
	}
	v, ok := flushOwners.Load(c.Cancel)
	if !ok {
		return 0, false
	}
	return v.(uint64), true
}
