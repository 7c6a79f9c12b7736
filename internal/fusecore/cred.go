package fusecore

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Cred is an active credential switch; Leave undoes it. The zero value
// (returned for root callers) is a no-op.
type Cred struct{ switched bool }

// Enter makes the current goroutine act with the caller's fsuid, fsgid
// and supplementary groups until Leave. It locks the goroutine to its OS
// thread and uses the raw per-thread syscalls (Go's syscall.Setgroups
// would change every thread). Root callers keep the daemon's identity.
// The daemon must be root for this to have any effect.
func Enter(c *fuse.Caller) Cred {
	if c == nil || (c.Uid == 0 && c.Gid == 0) || !isRoot {
		return Cred{}
	}
	groups := callerGroups(c)
	runtime.LockOSThread()
	var gp unsafe.Pointer
	if len(groups) > 0 {
		gp = unsafe.Pointer(&groups[0])
	}
	unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(gp), 0)
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(c.Gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(c.Uid), 0, 0)
	return Cred{switched: true}
}

// Leave restores the daemon's credentials and unlocks the thread.
func (cr Cred) Leave() {
	if !cr.switched {
		return
	}
	unix.RawSyscall(unix.SYS_SETFSUID, 0, 0, 0)
	unix.RawSyscall(unix.SYS_SETFSGID, 0, 0, 0)
	var gp unsafe.Pointer
	if len(daemonGroups) > 0 {
		gp = unsafe.Pointer(&daemonGroups[0])
	}
	unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(daemonGroups)), uintptr(gp), 0)
	runtime.UnlockOSThread()
}

var (
	isRoot       = os.Geteuid() == 0
	daemonGroups = func() []uint32 {
		gs, _ := unix.Getgroups()
		out := make([]uint32, len(gs))
		for i, g := range gs {
			out[i] = uint32(g)
		}
		return out
	}()
)

type groupEntry struct {
	uid, gid uint32
	groups   []uint32
	expires  time.Time
}

var (
	groupMu    sync.Mutex
	groupCache = map[uint32]groupEntry{}
)

// callerGroups returns the caller's supplementary groups from
// /proc/PID/status, cached per pid for a second (FUSE only sends uid,
// gid and pid).
func callerGroups(c *fuse.Caller) []uint32 {
	now := time.Now()
	groupMu.Lock()
	e, ok := groupCache[c.Pid]
	groupMu.Unlock()
	if ok && e.uid == c.Uid && e.gid == c.Gid && now.Before(e.expires) {
		return e.groups
	}
	gs := []uint32{c.Gid}
	if c.Pid != 0 {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(int(c.Pid)) + "/status"); err == nil {
			gs = parseGroups(b, c.Gid)
		}
	}
	groupMu.Lock()
	if len(groupCache) > 4096 {
		clear(groupCache)
	}
	groupCache[c.Pid] = groupEntry{c.Uid, c.Gid, gs, now.Add(time.Second)}
	groupMu.Unlock()
	return gs
}

func parseGroups(status []byte, gid uint32) []uint32 {
	gs := []uint32{}
	for _, line := range bytes.Split(status, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("Groups:")) {
			continue
		}
		for _, f := range bytes.Fields(line[len("Groups:"):]) {
			if v, err := strconv.ParseUint(string(f), 10, 32); err == nil {
				gs = append(gs, uint32(v))
			}
		}
	}
	if len(gs) == 0 {
		gs = append(gs, gid)
	}
	return gs
}

// CallerGroups exposes the supplementary groups Enter would use.
func CallerGroups(c *fuse.Caller) []uint32 { return callerGroups(c) }
