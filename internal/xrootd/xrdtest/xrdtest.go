// Package xrdtest runs an XRootD manager and data listener over a fake
// on-disk backend, shaped like Kaon's: the manager answers open with a
// redirect carrying an HMAC capability; the data listener verifies it,
// writes uploads to a staging file and publishes them only on close.
package xrdtest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/adler32"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// Cluster is a running manager + data listener pair.
type Cluster struct {
	Root     string // exported tree
	Staging  string // uploads in progress
	MgrAddr  string // host:port of the manager listener
	DataAddr string
	Mgr      *xrootd.Server
	Data     *xrootd.Server
	FS       *Backend
}

// Start starts a cluster on loopback with its tree in dir.
func Start(dir string, cfg xrootd.Config) (*Cluster, error) { return StartAt(dir, "127.0.0.1", cfg) }

// StartAt starts a cluster listening on host ("::1": IPv6 loopback).
func StartAt(dir, host string, cfg xrootd.Config) (*Cluster, error) {
	root := filepath.Join(dir, "export")
	staging := filepath.Join(dir, "staging")
	for _, d := range []string{root, staging} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	ml, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	dl, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		ml.Close()
		return nil, err
	}
	b := &Backend{Root: root, Staging: staging, DataAddr: dl.Addr().String(), key: []byte("xrdtest-key")}
	mcfg, dcfg := cfg, cfg
	mcfg.Namespace, mcfg.Data = b, nil
	dcfg.Namespace, dcfg.Data, dcfg.Manager = nil, b.Data(), ml.Addr().String()
	c := &Cluster{Root: root, Staging: staging, MgrAddr: ml.Addr().String(), DataAddr: dl.Addr().String(),
		Mgr: xrootd.NewServer(mcfg), Data: xrootd.NewServer(dcfg), FS: b}
	go c.Mgr.Serve(ml)
	go c.Data.Serve(dl)
	return c, nil
}

// Close stops both listeners.
func (c *Cluster) Close() {
	c.Mgr.Close()
	c.Data.Close()
}

// Backend implements xrootd.Namespace and xrootd.DataStore over a directory.
type Backend struct {
	Root, Staging string
	DataAddr      string
	key           []byte

	mu      sync.Mutex
	commits int // files published by Close
	aborts  int // uploads discarded
}

// Counts returns how many uploads were committed and aborted.
func (b *Backend) Counts() (commits, aborts int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.commits, b.aborts
}

var _ xrootd.Namespace = (*Backend)(nil)
var _ xrootd.DataStore = dataStore{}

func (b *Backend) disk(p string) string { return filepath.Join(b.Root, filepath.FromSlash(p)) }

func wrap(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	return kerr.Wrap(kerr.KindOf(err), op, p, err)
}

func info(name string, fi os.FileInfo) xrootd.FileInfo {
	st, _ := fi.Sys().(*syscall.Stat_t)
	out := xrootd.FileInfo{Name: name, IsDir: fi.IsDir(), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()),
		MTime: fi.ModTime(), Owner: "kaon", Group: "kaon"}
	if st != nil {
		out.ID = st.Ino
		out.CTime = time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
		out.ATime = time.Unix(st.Atim.Sec, st.Atim.Nsec)
	}
	if out.IsDir {
		out.Size = 4096
	}
	return out
}

func (b *Backend) Stat(_ context.Context, _ xrootd.Identity, p string) (xrootd.FileInfo, error) {
	fi, err := os.Stat(b.disk(p))
	if err != nil {
		return xrootd.FileInfo{}, wrap("stat", p, err)
	}
	return info(filepath.Base(p), fi), nil
}

func (b *Backend) List(_ context.Context, _ xrootd.Identity, p string) ([]xrootd.FileInfo, error) {
	ents, err := os.ReadDir(b.disk(p))
	if err != nil {
		return nil, wrap("dirlist", p, err)
	}
	out := make([]xrootd.FileInfo, 0, len(ents))
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, info(e.Name(), fi))
	}
	return out, nil
}

func (b *Backend) Mkdir(_ context.Context, _ xrootd.Identity, p string, mode uint32, parents bool) error {
	if parents {
		return wrap("mkdir", p, os.MkdirAll(b.disk(p), os.FileMode(mode)))
	}
	return wrap("mkdir", p, os.Mkdir(b.disk(p), os.FileMode(mode)))
}

func (b *Backend) Remove(_ context.Context, _ xrootd.Identity, p string) error {
	fi, err := os.Stat(b.disk(p))
	if err != nil {
		return wrap("rm", p, err)
	}
	if fi.IsDir() {
		return kerr.New(kerr.IsDir, "rm", p, "is a directory")
	}
	return wrap("rm", p, os.Remove(b.disk(p)))
}

func (b *Backend) Rmdir(_ context.Context, _ xrootd.Identity, p string) error {
	fi, err := os.Stat(b.disk(p))
	if err != nil {
		return wrap("rmdir", p, err)
	}
	if !fi.IsDir() {
		return kerr.New(kerr.NotDir, "rmdir", p, "not a directory")
	}
	return wrap("rmdir", p, syscall.Rmdir(b.disk(p)))
}

func (b *Backend) Rename(_ context.Context, _ xrootd.Identity, from, to string) error {
	return wrap("mv", from, os.Rename(b.disk(from), b.disk(to)))
}

func (b *Backend) Chmod(_ context.Context, _ xrootd.Identity, p string, mode uint32) error {
	return wrap("chmod", p, os.Chmod(b.disk(p), os.FileMode(mode)))
}

func (b *Backend) Truncate(_ context.Context, _ xrootd.Identity, p string, size int64) error {
	return wrap("truncate", p, os.Truncate(b.disk(p), size))
}

func (b *Backend) Checksum(_ context.Context, _ xrootd.Identity, p, algo string) (string, error) {
	if algo != "adler32" {
		return "", kerr.New(kerr.Unsupported, "checksum", p, "checksum "+algo+" not supported")
	}
	f, err := os.Open(b.disk(p))
	if err != nil {
		return "", wrap("checksum", p, err)
	}
	defer f.Close()
	return adler(f)
}

func adler(r io.Reader) (string, error) {
	h := adler32.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return fmt.Sprintf("%08x", h.Sum32()), nil
}

func (b *Backend) Locate(_ context.Context, _ xrootd.Identity, p string) ([]string, error) {
	if _, err := os.Stat(b.disk(p)); err != nil {
		return nil, wrap("locate", p, err)
	}
	return []string{b.DataAddr}, nil
}

func (b *Backend) StatFS(_ context.Context, _ xrootd.Identity, p string) (xrootd.StatFS, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(b.Root, &st); err != nil {
		return xrootd.StatFS{}, wrap("statvfs", p, err)
	}
	return xrootd.StatFS{Total: st.Blocks * uint64(st.Bsize), Free: st.Bavail * uint64(st.Bsize), Filesystems: 1}, nil
}

func (b *Backend) sign(p, mode string, exp int64) string {
	m := hmac.New(sha256.New, b.key)
	fmt.Fprintf(m, "%s\n%s\n%d", p, mode, exp)
	return hex.EncodeToString(m.Sum(nil))
}

// Open checks the request against the tree and mints a capability.
func (b *Backend) Open(_ context.Context, _ xrootd.Identity, p string, req xrootd.OpenRequest) (xrootd.Redirect, error) {
	fi, err := os.Stat(b.disk(p))
	switch {
	case err == nil && fi.IsDir():
		return xrootd.Redirect{}, kerr.New(kerr.IsDir, "open", p, "is a directory")
	case err == nil && req.Exclusive:
		return xrootd.Redirect{}, kerr.New(kerr.Exists, "open", p, "file exists")
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return xrootd.Redirect{}, wrap("open", p, err)
	case err != nil && !req.Create:
		return xrootd.Redirect{}, kerr.New(kerr.NotFound, "open", p, "no such file")
	case err != nil:
		parent := filepath.Dir(b.disk(p))
		if req.MkPath {
			if err := os.MkdirAll(parent, 0o755); err != nil {
				return xrootd.Redirect{}, wrap("open", p, err)
			}
		} else if _, err := os.Stat(parent); err != nil {
			return xrootd.Redirect{}, kerr.New(kerr.NotFound, "open", p, "parent directory does not exist")
		}
	}
	mode := "r"
	if req.Write {
		mode = "w"
		if req.Truncate || err != nil {
			mode = "c"
		}
	}
	exp := time.Now().Add(time.Hour).Unix()
	host, port, _ := net.SplitHostPort(b.DataAddr)
	pn, _ := strconv.Atoi(port)
	return xrootd.Redirect{Host: host, Port: pn,
		Opaque: fmt.Sprintf("kaon.mode=%s&kaon.exp=%d&kaon.cap=%s", mode, exp, b.sign(p, mode, exp))}, nil
}

// dataStore is the storage-server face of Backend (its Open would clash
// with Namespace.Open on the same type).
type dataStore struct{ b *Backend }

// Data returns the DataStore face of the backend.
func (b *Backend) Data() xrootd.DataStore { return dataStore{b} }

func (d dataStore) Open(ctx context.Context, id xrootd.Identity, p string, req xrootd.OpenRequest) (xrootd.DataFile, error) {
	return d.b.OpenData(ctx, id, p, req)
}

// OpenData verifies the capability and opens the file.
func (b *Backend) OpenData(_ context.Context, _ xrootd.Identity, p string, req xrootd.OpenRequest) (xrootd.DataFile, error) {
	mode, cap := req.Opaque.Get("kaon.mode"), req.Opaque.Get("kaon.cap")
	exp, _ := strconv.ParseInt(req.Opaque.Get("kaon.exp"), 10, 64)
	if cap == "" || !hmac.Equal([]byte(cap), []byte(b.sign(p, mode, exp))) {
		return nil, kerr.New(kerr.Permission, "open", p, "missing or invalid capability")
	}
	if time.Now().Unix() > exp {
		return nil, kerr.New(kerr.Expired, "open", p, "capability expired")
	}
	if req.Write && mode == "r" {
		return nil, kerr.New(kerr.Permission, "open", p, "capability is read-only")
	}
	switch mode {
	case "r":
		f, err := os.Open(b.disk(p))
		if err != nil {
			return nil, wrap("open", p, err)
		}
		return &file{b: b, p: p, f: f}, nil
	case "w":
		f, err := os.OpenFile(b.disk(p), os.O_RDWR, 0)
		if err != nil {
			return nil, wrap("open", p, err)
		}
		return &file{b: b, p: p, f: f}, nil
	default:
		f, err := os.CreateTemp(b.Staging, "up-*")
		if err != nil {
			return nil, wrap("open", p, err)
		}
		perm := os.FileMode(req.Mode & 0o777)
		if perm == 0 {
			perm = 0o644
		}
		f.Chmod(perm)
		return &file{b: b, p: p, f: f, staged: true}, nil
	}
}

type file struct {
	b      *Backend
	p      string
	f      *os.File
	staged bool
}

func (f *file) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.f.WriteAt(p, off)
	return n, wrap("write", f.p, err)
}
func (f *file) Truncate(size int64) error { return wrap("truncate", f.p, f.f.Truncate(size)) }
func (f *file) Sync() error               { return wrap("sync", f.p, f.f.Sync()) }
func (f *file) Stat() (xrootd.FileInfo, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return xrootd.FileInfo{}, wrap("stat", f.p, err)
	}
	return info(filepath.Base(f.p), fi), nil
}
func (f *file) Checksum(algo string) (string, error) {
	if algo != "adler32" {
		return "", kerr.New(kerr.Unsupported, "checksum", f.p, "checksum "+algo+" not supported")
	}
	return adler(io.NewSectionReader(f.f, 0, 1<<62))
}
func (f *file) Close() error {
	if !f.staged {
		return wrap("close", f.p, f.f.Close())
	}
	if err := f.f.Close(); err != nil {
		os.Remove(f.f.Name())
		return wrap("close", f.p, err)
	}
	if err := os.Rename(f.f.Name(), f.b.disk(f.p)); err != nil {
		os.Remove(f.f.Name())
		return wrap("close", f.p, err)
	}
	f.b.mu.Lock()
	f.b.commits++
	f.b.mu.Unlock()
	return nil
}
func (f *file) Abort() error {
	f.f.Close()
	if f.staged {
		os.Remove(f.f.Name())
		f.b.mu.Lock()
		f.b.aborts++
		f.b.mu.Unlock()
	}
	return nil
}
