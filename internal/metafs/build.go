package metafs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// BuildOptions tune Build.
type BuildOptions struct {
	// Workers bounds how many directories are read concurrently (default
	// 4*GOMAXPROCS, at least 8: walking a network filesystem is latency
	// bound). Output does not depend on it.
	Workers int
	// NoXattrs skips listxattr/getxattr (one fewer call per entry).
	NoXattrs bool
	// Progress, if set, is incremented once per entry indexed.
	Progress *atomic.Int64
}

// bent is one entry while building; the tree of these is discarded once
// serialized into the flat tables.
type bent struct {
	name   string
	st     unix.Stat_t
	target string
	xattrs []byte // encoded blob, nil if none
	dir    *bdir
}

type bdir struct{ ents []bent }

type builder struct {
	opt   BuildOptions
	sem   chan struct{}
	wg    sync.WaitGroup
	errMu sync.Mutex
	err   error
}

func (b *builder) fail(err error) {
	b.errMu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.errMu.Unlock()
}

func (b *builder) failed() bool {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	return b.err != nil
}

// Build walks root once and returns its index. Directories are read in
// parallel; the result is deterministic (breadth-first, each directory's
// entries in listing order). Any unreadable entry fails the build: an
// incomplete index would answer "does not exist" for files that do.
func Build(root string, opt BuildOptions) (*Index, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, kerr.Wrap(kerr.Invalid, "metafs index", root, err)
	}
	if opt.Workers <= 0 {
		opt.Workers = max(8, 4*runtime.GOMAXPROCS(0))
	}
	b := &builder{opt: opt, sem: make(chan struct{}, opt.Workers)}
	var top bent
	if err := unix.Stat(abs, &top.st); err != nil {
		return nil, kerr.Wrap(kerr.KindOf(err), "metafs index", abs, err)
	}
	if top.st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, kerr.New(kerr.NotDir, "metafs index", abs, "not a directory")
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(abs, &sfs); err != nil {
		return nil, kerr.Wrap(kerr.KindOf(err), "metafs index", abs, err)
	}
	if !opt.NoXattrs {
		top.xattrs, err = readXattrs(abs, true)
		if err != nil {
			return nil, kerr.Wrap(kerr.KindOf(err), "metafs index: listxattr", abs, err)
		}
	}
	top.dir = &bdir{}
	b.walk(abs, top.dir)
	b.wg.Wait()
	if b.err != nil {
		return nil, b.err
	}
	x := serialize(&top, abs)
	x.StatFS = StatFS{Bsize: uint32(sfs.Bsize), Blocks: sfs.Blocks, Bfree: sfs.Bfree, Bavail: sfs.Bavail,
		Files: sfs.Files, Ffree: sfs.Ffree, Namelen: uint32(sfs.Namelen), Frsize: uint32(sfs.Frsize)}
	return x, nil
}

func (b *builder) walk(path string, d *bdir) {
	if b.failed() {
		return
	}
	if err := b.readDir(path, d); err != nil {
		b.fail(err)
		return
	}
	for k := range d.ents {
		e := &d.ents[k]
		if e.dir == nil {
			continue
		}
		sub := path + "/" + e.name
		select {
		case b.sem <- struct{}{}:
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.walk(sub, e.dir)
				<-b.sem
			}()
		default:
			b.walk(sub, e.dir)
		}
	}
}

func (b *builder) readDir(path string, d *bdir) error {
	f, err := os.Open(path)
	if err != nil {
		return kerr.Wrap(kerr.KindOf(err), "metafs index: open", path, err)
	}
	defer f.Close()
	des, err := f.ReadDir(-1) // listing order, no per-entry stat
	if err != nil {
		return kerr.Wrap(kerr.KindOf(err), "metafs index: readdir", path, err)
	}
	fd := int(f.Fd())
	d.ents = make([]bent, len(des))
	for k, de := range des {
		e := &d.ents[k]
		e.name = de.Name()
		if de.Type()&os.ModeSymlink != 0 {
			// readlink before lstat: reading a link may bump its atime.
			e.target, err = readlinkat(fd, e.name)
			if err != nil {
				return kerr.Wrap(kerr.KindOf(err), "metafs index: readlink", path+"/"+e.name, err)
			}
		}
		if err := unix.Fstatat(fd, e.name, &e.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return kerr.Wrap(kerr.KindOf(err), "metafs index: lstat", path+"/"+e.name, err)
		}
		switch e.st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			e.dir = &bdir{}
		case unix.S_IFLNK:
			if de.Type()&os.ModeSymlink == 0 { // replaced between readdir and lstat
				e.target, _ = readlinkat(fd, e.name)
			}
		}
		if !b.opt.NoXattrs {
			e.xattrs, err = readXattrs(path+"/"+e.name, false)
			if err != nil {
				return kerr.Wrap(kerr.KindOf(err), "metafs index: listxattr", path+"/"+e.name, err)
			}
		}
		if b.opt.Progress != nil {
			b.opt.Progress.Add(1)
		}
	}
	return nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		l, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if l < n {
			return string(buf[:l]), nil
		}
	}
}

// readXattrs returns the encoded xattr blob of path (nil if none).
func readXattrs(path string, follow bool) ([]byte, error) {
	list, get := unix.Llistxattr, unix.Lgetxattr
	if follow {
		list, get = unix.Listxattr, unix.Getxattr
	}
	var small [512]byte
	buf := small[:]
	n, err := list(path, buf)
	for errors.Is(err, unix.ERANGE) {
		if n, err = list(path, nil); err != nil {
			break
		}
		buf = make([]byte, n+64)
		n, err = list(path, buf)
	}
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ENODATA) {
		return nil, nil
	}
	if err != nil || n == 0 {
		return nil, err
	}
	names := buf[:n]
	var blob []byte
	blob = binary.LittleEndian.AppendUint32(blob, 0)
	cnt := uint32(0)
	for len(names) > 0 {
		j := 0
		for j < len(names) && names[j] != 0 {
			j++
		}
		name := string(names[:j])
		names = names[min(j+1, len(names)):]
		if name == "" {
			continue
		}
		val := make([]byte, 256)
		vn, err := get(path, name, val)
		for errors.Is(err, unix.ERANGE) {
			if vn, err = get(path, name, nil); err != nil {
				break
			}
			val = make([]byte, vn+64)
			vn, err = get(path, name, val)
		}
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		blob = binary.LittleEndian.AppendUint16(blob, uint16(len(name)))
		blob = append(blob, name...)
		blob = binary.LittleEndian.AppendUint32(blob, uint32(vn))
		blob = append(blob, val[:vn]...)
		cnt++
	}
	if cnt == 0 {
		return nil, nil
	}
	binary.LittleEndian.PutUint32(blob, cnt)
	return blob, nil
}

func tsNs(ts unix.Timespec) int64 { return ts.Sec*1e9 + ts.Nsec }

// serialize lays the tree out breadth-first into the flat tables.
func serialize(top *bent, root string) *Index {
	// count entries
	n := 1
	queue := []*bent{top}
	for q := 0; q < len(queue); q++ {
		if d := queue[q].dir; d != nil {
			n += len(d.ents)
			for k := range d.ents {
				if d.ents[k].dir != nil {
					queue = append(queue, &d.ents[k])
				}
			}
		}
	}
	x := &Index{n: n, ents: make([]byte, n*recSize), sorted: make([]byte, 4*n)}
	arena := make([]byte, 0, n*16)
	arena = append(arena, 0) // offset 0 is never a real string
	fp := xxhash.New()
	var fpb []byte
	var dirs uint32
	le := binary.LittleEndian

	type item struct {
		e      *bent
		idx    int
		parent int
	}
	order := []item{{top, 0, 0}}
	next := 1
	for q := 0; q < len(order); q++ {
		it := order[q]
		e, r := it.e, x.ents[it.idx*recSize:(it.idx+1)*recSize]
		le.PutUint32(r[0:], uint32(it.parent))
		le.PutUint32(r[4:], uint32(len(arena)))
		if it.idx != 0 {
			arena = append(arena, e.name...)
			le.PutUint16(r[84:], uint16(len(e.name)))
		}
		st := &e.st
		le.PutUint32(r[8:], st.Mode)
		le.PutUint32(r[12:], st.Uid)
		le.PutUint32(r[16:], st.Gid)
		le.PutUint32(r[20:], uint32(st.Nlink))
		le.PutUint64(r[24:], uint64(st.Size))
		le.PutUint64(r[32:], uint64(st.Blocks))
		le.PutUint64(r[40:], st.Ino)
		le.PutUint64(r[48:], uint64(tsNs(st.Mtim)))
		le.PutUint64(r[56:], uint64(tsNs(st.Ctim)))
		le.PutUint64(r[64:], uint64(tsNs(st.Atim)))
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			d := e.dir
			le.PutUint32(r[72:], uint32(next))
			le.PutUint32(r[76:], uint32(len(d.ents)))
			perm := make([]int, len(d.ents))
			for k := range d.ents {
				order = append(order, item{&d.ents[k], next + k, it.idx})
				perm[k] = k
			}
			sort.Slice(perm, func(a, b int) bool { return d.ents[perm[a]].name < d.ents[perm[b]].name })
			for k, p := range perm {
				le.PutUint32(x.sorted[4*(next+k):], uint32(next+p))
			}
			next += len(d.ents)
			dirs++
			// fingerprint input, index order (= deterministic)
			fpb = fpb[:0]
			fpb = appendDirFP(fpb, it.idx, st)
			fp.Write(fpb)
		case unix.S_IFLNK:
			le.PutUint32(r[72:], uint32(len(arena)))
			le.PutUint32(r[76:], uint32(len(e.target)))
			arena = append(arena, e.target...)
		case unix.S_IFCHR, unix.S_IFBLK:
			le.PutUint32(r[72:], uint32(st.Rdev))
			le.PutUint32(r[76:], uint32(st.Rdev>>32))
		}
		if e.xattrs != nil {
			le.PutUint32(r[80:], uint32(len(arena)))
			arena = append(arena, e.xattrs...)
		} else {
			le.PutUint32(r[80:], noXattr)
		}
	}
	x.arena = arena
	x.Source = Source{Root: root, Dev: top.st.Dev, Ino: top.st.Ino, Mtime: tsNs(top.st.Mtim),
		Ctime: tsNs(top.st.Ctim), Fingerprint: fp.Sum64(), Dirs: dirs, BuiltAt: time.Now()}
	return x
}

// appendDirFP encodes one directory's contribution to the fingerprint. The
// path is represented by its index, which is a function of the whole tree
// shape, so renames and moves change the fingerprint too.
func appendDirFP(b []byte, idx int, st *unix.Stat_t) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(idx))
	b = binary.LittleEndian.AppendUint64(b, uint64(tsNs(st.Mtim)))
	b = binary.LittleEndian.AppendUint64(b, uint64(tsNs(st.Ctim)))
	b = binary.LittleEndian.AppendUint64(b, uint64(st.Size))
	b = binary.LittleEndian.AppendUint32(b, st.Mode)
	b = binary.LittleEndian.AppendUint64(b, st.Ino)
	return b
}

var errStale = errors.New("index is stale")

// IsStale reports whether err is a staleness refusal from CheckFresh.
func IsStale(err error) bool { return errors.Is(err, errStale) }

// CheckFresh compares the index's recorded source with the live tree
// reachable through rootfd (a directory fd on the indexed root): the
// root's inode, then the directory fingerprint (one fstatat per directory,
// no listing). The device number is not compared: a network or FUSE
// filesystem gets a new one at every mount and on every node that mounts
// it, while the index is built once and shared. It catches entries added, removed or renamed anywhere and
// directory attribute changes; in-place edits of file contents or file
// attributes need `verify`.
func (x *Index) CheckFresh(rootfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstat(rootfd, &st); err != nil {
		return kerr.Wrap(kerr.KindOf(err), "metafs check", name, err)
	}
	stale := func(why string) error {
		return &marked{&kerr.Error{Kind: kerr.Invalid, Op: "metafs check", Path: name,
			Msg: "index is stale (built " + x.Source.BuiltAt.UTC().Format(time.RFC3339) + " from " + x.Source.Root + "): " + why +
				"; rebuild with `kaon metafs index`, or mount anyway with --force"}, errStale}
	}
	if st.Ino != x.Source.Ino {
		return stale("root is a different directory (inode changed)")
	}
	h := xxhash.New()
	var b []byte
	for i := 0; i < x.n; i++ {
		if !x.IsDir(i) {
			continue
		}
		if i == 0 {
			b = appendDirFP(b[:0], 0, &st)
		} else {
			var s unix.Stat_t
			if err := unix.Fstatat(rootfd, x.Path(i), &s, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
					return stale("directory " + x.Path(i) + " no longer exists")
				}
				return kerr.Wrap(kerr.KindOf(err), "metafs check", x.Path(i), err)
			}
			b = appendDirFP(b[:0], i, &s)
		}
		h.Write(b)
	}
	if h.Sum64() != x.Source.Fingerprint {
		if tsNs(st.Mtim) != x.Source.Mtime || tsNs(st.Ctim) != x.Source.Ctime {
			return stale("root directory was modified")
		}
		return stale("a directory below the root was modified (entries added, removed or renamed)")
	}
	return nil
}

// checkOpen reports whether the lower file open at fd is still what entry i
// describes: a regular file with the indexed size, mtime and ctime (an edit
// that keeps the size and sets the mtime back, as `touch -r` or a restoring
// copy does, still moves the ctime, which nobody can set). Both modes call
// it on open, before serving any of the file's data, and fail the open with
// EIO when it does not hold (see the package doc for a file that changes
// after that). lower names the tree below, for the error.
func (x *Index) checkOpen(i, fd int, lower string) error {
	const op = "metafs open"
	p := filepath.Join(lower, x.Path(i))
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return kerr.Wrap(kerr.KindOf(err), op, p, err)
	}
	a := x.Attr(i)
	if st.Mode&unix.S_IFMT == unix.S_IFREG && uint64(st.Size) == a.Size && tsNs(st.Mtim) == a.Mtime && tsNs(st.Ctim) == a.Ctime {
		return nil
	}
	found := ""
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		found = "not a regular file, "
	}
	ts := func(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }
	return kerr.New(kerr.IO, op, p, fmt.Sprintf("changed since the index was built (found %ssize %d, mtime %s, ctime %s; index: size %d, mtime %s, ctime %s); rebuild the index",
		found, st.Size, ts(tsNs(st.Mtim)), ts(tsNs(st.Ctim)), a.Size, ts(a.Mtime), ts(a.Ctime)))
}
