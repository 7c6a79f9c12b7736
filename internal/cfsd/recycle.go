package cfsd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/kerr"
	"golang.org/x/sys/unix"
)

// Entry is one deleted file or directory kept in the recycle bin.
type Entry struct {
	ID   string `json:"id"`
	Path string `json:"path"` // original path inside the mount
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Time int64  `json:"time"` // unix seconds of the deletion
	Type string `json:"type"` // file, dir, symlink, other
	Size int64  `json:"size"`
}

// Recycle is the bin: <state>/recycle/<id> holds the objects (moved there
// by rename, so deletion costs no copy), <state>/recycle.log is an
// append-only journal of add/del records, compacted at start.
type Recycle struct {
	f       *FS
	mu      sync.Mutex
	binFd   int
	log     *os.File
	entries map[string]*Entry
	enabled bool
	seq     uint64
}

const (
	recycleConf = "recycle.enabled"
	recycleLog  = "recycle.log"
)

type logRec struct {
	Op string `json:"op"` // add, del
	Entry
}

func openRecycle(f *FS, enable bool) (*Recycle, error) {
	st := f.state
	if err := unix.Mkdirat(st.fd, "recycle", 0o700); err != nil && err != unix.EEXIST {
		return nil, kerr.Wrap(kerr.KindOf(err), "cfsd state", st.name("recycle"), err)
	}
	fd, err := unix.Openat(st.fd, "recycle", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, kerr.Wrap(kerr.KindOf(err), "cfsd state", st.name("recycle"), err)
	}
	r := &Recycle{f: f, binFd: fd, entries: map[string]*Entry{}}
	if b, err := st.readFile(recycleConf); err == nil {
		r.enabled = strings.TrimSpace(string(b)) == "1"
	}
	if enable {
		r.enabled = true
		_ = st.writeFile(recycleConf, []byte("1\n"))
	}
	if lf, err := st.open(recycleLog, unix.O_RDONLY); err == nil {
		sc := bufio.NewScanner(lf)
		sc.Buffer(make([]byte, 1<<16), 1<<24)
		for sc.Scan() {
			var rec logRec
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			if rec.Op == "add" {
				e := rec.Entry
				r.entries[e.ID] = &e
			} else {
				delete(r.entries, rec.ID)
			}
		}
		lf.Close()
	}
	// Drop journal entries whose object vanished, then compact.
	for id := range r.entries {
		var st unix.Stat_t
		if unix.Fstatat(fd, id, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			delete(r.entries, id)
		}
	}
	var compact bytes.Buffer
	enc := json.NewEncoder(&compact)
	for _, e := range r.sorted() {
		_ = enc.Encode(logRec{Op: "add", Entry: *e})
	}
	if err := st.writeFile(recycleLog, compact.Bytes()); err != nil {
		return nil, err
	}
	if r.log, err = st.open(recycleLog, unix.O_WRONLY|unix.O_APPEND); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Recycle) sorted() []*Entry {
	out := make([]*Entry, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Enabled reports whether deletions are diverted.
func (r *Recycle) Enabled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.enabled
}

// SetEnabled switches the bin and persists the switch.
func (r *Recycle) SetEnabled(on bool) error {
	r.mu.Lock()
	r.enabled = on
	r.mu.Unlock()
	v := "0\n"
	if on {
		v = "1\n"
	}
	return r.f.state.writeFile(recycleConf, []byte(v))
}

// Close closes the journal.
func (r *Recycle) Close() error {
	unix.Close(r.binFd)
	return r.log.Close()
}

func (r *Recycle) journal(rec logRec) {
	b, _ := json.Marshal(rec)
	_, _ = r.log.Write(append(b, '\n'))
}

func typeName(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "file"
	case syscall.S_IFDIR:
		return "dir"
	case syscall.S_IFLNK:
		return "symlink"
	}
	return "other"
}

func dirEmpty(dirfd int, name string) (bool, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && err != io.EOF {
		return false, err
	}
	return len(names) == 0, nil
}

// Remove deletes parent/name for the caller with the bin enabled. The
// object goes into the bin (renamed there, recorded in the journal) only
// when this is its last name: a file with other hard links is unlinked
// for good, since its data stays reachable under those names, and its
// link count drops as the caller expects. binned reports a move into the
// bin; st receives the object's attributes before the removal. The
// kernel has already checked the caller may delete (default_permissions,
// sticky bit); the backend's own view is asked too (write+search on the
// parent as the caller). Removals are serialized so that two names of
// one file removed at once cannot both see the other and both unlink.
func (r *Recycle) Remove(c *fuse.Caller, parent *node, name string, st *syscall.Stat_t, dir bool) (binned bool, errno syscall.Errno) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := fstatat(parent.fd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, errnoOf(err)
	}
	isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
	if dir && !isDir {
		return false, syscall.ENOTDIR
	}
	if !dir && isDir {
		return false, syscall.EISDIR
	}
	if !isDir && st.Nlink > 1 {
		cr := fusecore.Enter(c)
		err := unix.Unlinkat(parent.fd, name, 0)
		cr.Leave()
		return false, errnoOf(err)
	}
	cr := fusecore.Enter(c)
	err := unix.Faccessat2(parent.fd, "", unix.W_OK|unix.X_OK, unix.AT_EACCESS|unix.AT_EMPTY_PATH)
	cr.Leave()
	if err != nil {
		return false, errnoOf(err)
	}
	if dir {
		empty, err := dirEmpty(parent.fd, name)
		if err != nil {
			return false, errnoOf(err)
		}
		if !empty {
			return false, syscall.ENOTEMPTY
		}
	}
	r.seq++
	now := time.Now()
	id := fmt.Sprintf("%016x.%d", now.UnixNano(), r.seq)
	if err := unix.Renameat2(parent.fd, name, r.binFd, id, unix.RENAME_NOREPLACE); err != nil {
		return false, errnoOf(err)
	}
	e := &Entry{ID: id, Path: path.Join("/", parent.Path(nil), name), UID: st.Uid, GID: st.Gid,
		Time: now.Unix(), Type: typeName(st.Mode), Size: st.Size}
	if !isDir && st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		e.Size = 0
	}
	r.entries[id] = e
	r.journal(logRec{Op: "add", Entry: *e})
	return true, 0
}

// List returns the entries the caller may see (all for root, own
// otherwise), oldest first.
func (r *Recycle) List(c *fuse.Caller) []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Entry
	for _, e := range r.sorted() {
		if c.Uid == 0 || e.UID == c.Uid {
			out = append(out, *e)
		}
	}
	return out
}

// Restore puts entry id back at its original path, recreating missing
// parent directories (owned by the entry's owner) and refusing to
// overwrite anything that now exists there.
func (r *Recycle) Restore(c *fuse.Caller, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restoreLocked(c, id)
}

func (r *Recycle) restoreLocked(c *fuse.Caller, id string) error {
	e := r.entries[id]
	if e == nil || (c.Uid != 0 && e.UID != c.Uid) {
		return kerr.New(kerr.NotFound, "restore", id, "no such recycle entry")
	}
	comps := strings.Split(strings.Trim(e.Path, "/"), "/")
	dirfd, err := unix.Dup(r.f.rootFd)
	if err != nil {
		return err
	}
	defer func() { unix.Close(dirfd) }()
	in := &r.f.root.Inode
	for _, comp := range comps[:len(comps)-1] {
		fd, err := unix.Openat(dirfd, comp, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			if err = unix.Mkdirat(dirfd, comp, 0o755); err == nil {
				_ = unix.Fchownat(dirfd, comp, int(e.UID), int(e.GID), unix.AT_SYMLINK_NOFOLLOW)
				r.f.charge(e.UID, 0, 1)
				fd, err = unix.Openat(dirfd, comp, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			return kerr.Wrap(kerr.KindOf(err), "restore", e.Path, err)
		}
		unix.Close(dirfd)
		dirfd = fd
		in = invalidate(in, comp)
	}
	base := comps[len(comps)-1]
	if err := unix.Renameat2(r.binFd, id, dirfd, base, unix.RENAME_NOREPLACE); err != nil {
		if err == unix.EEXIST {
			return kerr.New(kerr.Exists, "restore", e.Path, "target exists; refusing to overwrite")
		}
		return kerr.Wrap(kerr.KindOf(err), "restore", e.Path, err)
	}
	invalidate(in, base)
	if q := r.f.quota; q != nil {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			sz := int64(0)
			if st.Mode&unix.S_IFMT == unix.S_IFREG {
				sz = st.Size
			}
			q.Charge(st.Uid, sz, 1)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if sub, err := unix.Openat(dirfd, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
					walkAt(sub, nil, func(st *unix.Stat_t) {
						sz := int64(0)
						if st.Mode&unix.S_IFMT == unix.S_IFREG {
							sz = st.Size
						}
						q.Charge(st.Uid, sz, 1)
					})
					unix.Close(sub)
				}
			}
		}
	}
	delete(r.entries, id)
	r.journal(logRec{Op: "del", Entry: Entry{ID: id}})
	return nil
}

// invalidate drops the kernel's (possibly negative) dentry for name under
// in and returns the child inode if the tree knows it.
func invalidate(in *fs.Inode, name string) *fs.Inode {
	if in == nil {
		return nil
	}
	_ = in.NotifyEntry(name)
	return in.GetChild(name)
}

// RestoreTree restores every entry at or below p, most recent deletion
// first (so a directory comes back before the files deleted inside it).
func (r *Recycle) RestoreTree(c *fuse.Caller, p string) (int, error) {
	p = path.Clean("/" + p)
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, e := range r.sorted() {
		if (e.Path == p || strings.HasPrefix(e.Path, p+"/") || p == "/") && (c.Uid == 0 || e.UID == c.Uid) {
			ids = append(ids, e.ID)
		}
	}
	n := 0
	for i := len(ids) - 1; i >= 0; i-- {
		if err := r.restoreLocked(c, ids[i]); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, kerr.New(kerr.NotFound, "restore", p, "nothing in the recycle bin under this path")
	}
	return n, nil
}

// Purge deletes for good the caller's entries (all for root) older than
// age.
func (r *Recycle) Purge(c *fuse.Caller, age time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	cut := time.Now().Add(-age).Unix()
	n := 0
	for id, e := range r.entries {
		if e.Time > cut || (c.Uid != 0 && e.UID != c.Uid) {
			continue
		}
		removeAllAt(r.binFd, id)
		delete(r.entries, id)
		r.journal(logRec{Op: "del", Entry: Entry{ID: id}})
		n++
	}
	return n
}

// removeAllAt removes dirfd/name and everything below it.
func removeAllAt(dirfd int, name string) {
	if unix.Unlinkat(dirfd, name, 0) == nil {
		return
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(fd), name)
	for {
		names, _ := d.Readdirnames(512)
		if len(names) == 0 {
			break
		}
		for _, ch := range names {
			removeAllAt(fd, ch)
		}
	}
	d.Close()
	_ = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

func (r *Recycle) render(c *fuse.Caller) []byte {
	var b strings.Builder
	state := "disabled"
	if r.Enabled() {
		state = "enabled"
	}
	fmt.Fprintf(&b, "# recycle %s\n# id time uid type size path\n", state)
	for _, e := range r.List(c) {
		fmt.Fprintf(&b, "%s %s %d %s %d %s\n", e.ID, time.Unix(e.Time, 0).UTC().Format(time.RFC3339), e.UID, e.Type, e.Size, e.Path)
	}
	return []byte(b.String())
}

// parseAge accepts Go durations plus a "d" (days) suffix and "all".
func parseAge(s string) (time.Duration, error) {
	if s == "all" {
		return -time.Hour * 24 * 365 * 100, nil
	}
	if strings.HasSuffix(s, "d") {
		var d int
		if _, err := fmt.Sscanf(s, "%dd", &d); err != nil || d < 0 {
			return 0, fmt.Errorf("bad age %q", s)
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func (r *Recycle) exec(c *fuse.Caller, data []byte) error {
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		const where = ".proc/recycle"
		switch {
		case (f[0] == "enable" || f[0] == "disable") && len(f) == 1:
			if c.Uid != 0 {
				return kerr.New(kerr.Permission, f[0], where, "only root may switch the recycle bin")
			}
			if err := r.SetEnabled(f[0] == "enable"); err != nil {
				return err
			}
		case f[0] == "restore" && len(f) == 2:
			if err := r.Restore(c, f[1]); err != nil {
				return err
			}
		case f[0] == "restore-tree" && len(f) == 2:
			if _, err := r.RestoreTree(c, f[1]); err != nil {
				return err
			}
		case f[0] == "purge" && len(f) == 2:
			age, err := parseAge(f[1])
			if err != nil {
				return kerr.New(kerr.Invalid, "purge", where, err.Error())
			}
			r.Purge(c, age)
		default:
			return kerr.New(kerr.Invalid, line, where, "commands: enable | disable | restore <id> | restore-tree <path> | purge <age|all>")
		}
	}
	return nil
}
