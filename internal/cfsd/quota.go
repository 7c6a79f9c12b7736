package cfsd

import (
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kaon-storage/kaon/internal/kerr"
	"golang.org/x/sys/unix"
)

// Usage is one user's accounting. Limits of 0 mean unlimited.
type Usage struct {
	Bytes       int64 `json:"bytes"`
	Inodes      int64 `json:"inodes"`
	BytesLimit  int64 `json:"bytes_limit"`
	InodesLimit int64 `json:"inodes_limit"`
}

// Quota tracks per-uid bytes (logical file sizes) and inodes under the
// backend tree and persists them with the limits in a JSON file.
type Quota struct {
	dir   stateDir
	mu    sync.Mutex
	users map[uint32]*Usage
	dirty bool
	stop  chan struct{}
	done  chan struct{}
}

type quotaFile struct {
	Users map[string]*Usage `json:"users"`
}

const quotaFileName = "quota.json"

func openQuota(dir stateDir) (*Quota, error) {
	q := &Quota{dir: dir, users: map[uint32]*Usage{}, stop: make(chan struct{}), done: make(chan struct{})}
	b, err := dir.readFile(quotaFileName)
	if err == nil {
		var qf quotaFile
		if err := json.Unmarshal(b, &qf); err != nil {
			return nil, kerr.Wrap(kerr.IO, "quota load", dir.name(quotaFileName), err)
		}
		for k, u := range qf.Users {
			uid, err := strconv.ParseUint(k, 10, 32)
			if err == nil && u != nil {
				q.users[uint32(uid)] = u
			}
		}
	} else if !os.IsNotExist(err) {
		return nil, kerr.Wrap(kerr.IO, "quota load", dir.name(quotaFileName), err)
	}
	go q.flusher()
	return q, nil
}

func (q *Quota) flusher() {
	defer close(q.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-t.C:
			_ = q.save(false)
		}
	}
}

// save writes the file atomically if anything changed (or force).
func (q *Quota) save(force bool) error {
	q.mu.Lock()
	if !q.dirty && !force {
		q.mu.Unlock()
		return nil
	}
	qf := quotaFile{Users: map[string]*Usage{}}
	for uid, u := range q.users {
		c := *u
		qf.Users[strconv.FormatUint(uint64(uid), 10)] = &c
	}
	q.dirty = false
	q.mu.Unlock()
	b, _ := json.MarshalIndent(qf, "", " ")
	return q.dir.writeFile(quotaFileName, b)
}

// Close stops the flusher and persists.
func (q *Quota) Close() error {
	close(q.stop)
	<-q.done
	return q.save(true)
}

func (q *Quota) get(uid uint32) *Usage {
	u := q.users[uid]
	if u == nil {
		u = &Usage{}
		q.users[uid] = u
	}
	return u
}

// Charge adds (or with negative values releases) usage.
func (q *Quota) Charge(uid uint32, bytes, inodes int64) {
	if bytes == 0 && inodes == 0 {
		return
	}
	q.mu.Lock()
	u := q.get(uid)
	u.Bytes += bytes
	u.Inodes += inodes
	if u.Bytes < 0 {
		u.Bytes = 0
	}
	if u.Inodes < 0 {
		u.Inodes = 0
	}
	q.dirty = true
	q.mu.Unlock()
}

// Check returns EDQUOT if adding bytes/inodes would exceed uid's limits.
// Root is never limited.
func (q *Quota) Check(uid uint32, bytes, inodes int64) syscall.Errno {
	if uid == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.users[uid]
	if u == nil {
		return 0
	}
	if bytes > 0 && u.BytesLimit > 0 && u.Bytes+bytes > u.BytesLimit {
		return syscall.EDQUOT
	}
	if inodes > 0 && u.InodesLimit > 0 && u.Inodes+inodes > u.InodesLimit {
		return syscall.EDQUOT
	}
	return 0
}

// Limited reports whether uid has a byte limit (its writes must then go
// through the daemon to be checked).
func (q *Quota) Limited(uid uint32) bool {
	if uid == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.users[uid]
	return u != nil && u.BytesLimit > 0
}

// Get returns a copy of uid's usage.
func (q *Quota) Get(uid uint32) Usage {
	q.mu.Lock()
	defer q.mu.Unlock()
	if u := q.users[uid]; u != nil {
		return *u
	}
	return Usage{}
}

// SetLimit sets uid's limits (0 = unlimited).
func (q *Quota) SetLimit(uid uint32, bytes, inodes int64) {
	q.mu.Lock()
	u := q.get(uid)
	u.BytesLimit, u.InodesLimit = bytes, inodes
	q.dirty = true
	q.mu.Unlock()
	_ = q.save(false)
}

// Reconcile replaces the usage with a fresh scan (limits are kept).
func (q *Quota) Reconcile(scan map[uint32]*Usage) error {
	q.mu.Lock()
	for _, u := range q.users {
		u.Bytes, u.Inodes = 0, 0
	}
	for uid, s := range scan {
		u := q.get(uid)
		u.Bytes, u.Inodes = s.Bytes, s.Inodes
	}
	q.dirty = true
	q.mu.Unlock()
	return q.save(true)
}

// scanUsage walks the backend (relative to directory fds, skipping the
// state dir) and sums logical bytes and inodes per owner; hard-linked
// files count once.
func (f *FS) scanUsage() map[uint32]*Usage {
	out := map[uint32]*Usage{}
	seen := map[[2]uint64]bool{}
	add := func(st *unix.Stat_t) {
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			k := [2]uint64{st.Dev, st.Ino}
			if seen[k] {
				return
			}
			seen[k] = true
		}
		u := out[st.Uid]
		if u == nil {
			u = &Usage{}
			out[st.Uid] = u
		}
		u.Inodes++
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			u.Bytes += st.Size
		}
	}
	walkAt(f.rootFd, func(name string) bool { return f.stateName != "" && name == f.stateName || name == procName }, add)
	return out
}

// walkAt calls fn for every entry below dirfd (not dirfd itself).
// skip filters names at the top level only.
func walkAt(dirfd int, skip func(string) bool, fn func(*unix.Stat_t)) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(fd), "dir")
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, name := range names {
			if skip != nil && skip(name) {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			fn(&st)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				sub, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err == nil {
					walkAt(sub, nil, fn)
					unix.Close(sub)
				}
			}
		}
		if err != nil || len(names) == 0 {
			return
		}
	}
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return u.Username
	}
	return strconv.Itoa(int(uid))
}

// render lists usage: everyone for root, only the caller otherwise.
func (q *Quota) render(c *fuse.Caller) []byte {
	q.mu.Lock()
	uids := make([]uint32, 0, len(q.users))
	for uid := range q.users {
		if c.Uid == 0 || uid == c.Uid {
			uids = append(uids, uid)
		}
	}
	q.mu.Unlock()
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-12s %14s %14s %10s %10s\n", "uid", "user", "bytes", "bytes_limit", "inodes", "inodes_lim")
	for _, uid := range uids {
		u := q.Get(uid)
		fmt.Fprintf(&b, "%-8d %-12s %14d %14d %10d %10d\n", uid, userName(uid), u.Bytes, u.BytesLimit, u.Inodes, u.InodesLimit)
	}
	return []byte(b.String())
}

// parseSize accepts 123, 10K, 5M, 2G, 1T (powers of 1024).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	if k := len(s); k > 0 {
		switch s[k-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:k-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return v * mult, nil
}

// exec runs "set <uid|user> [bytes=N] [inodes=N]" (root only).
func (q *Quota) exec(c *fuse.Caller, data []byte) error {
	if c.Uid != 0 {
		return kerr.New(kerr.Permission, "quota", ".proc/quota", "only root may set limits")
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] != "set" || len(f) < 3 {
			return kerr.New(kerr.Invalid, "quota", ".proc/quota", "usage: set <uid|user> bytes=N inodes=N")
		}
		uid, err := lookupUID(f[1])
		if err != nil {
			return kerr.New(kerr.Invalid, "quota", f[1], err.Error())
		}
		cur := q.Get(uid)
		bytes, inodes := cur.BytesLimit, cur.InodesLimit
		for _, kv := range f[2:] {
			k, v, ok := strings.Cut(kv, "=")
			n, err := parseSize(v)
			if !ok || err != nil {
				return kerr.New(kerr.Invalid, "quota", kv, "expected bytes=N or inodes=N")
			}
			switch k {
			case "bytes":
				bytes = n
			case "inodes":
				inodes = n
			default:
				return kerr.New(kerr.Invalid, "quota", kv, "unknown limit")
			}
		}
		q.SetLimit(uid, bytes, inodes)
	}
	return nil
}

func lookupUID(s string) (uint32, error) {
	if v, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(v), nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(v), err
}
