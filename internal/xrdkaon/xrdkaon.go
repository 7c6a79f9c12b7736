// Package xrdkaon connects the XRootD protocol server to Kaon's core: the
// namespace server answers metadata and redirects opens to a storage
// server's root:// listener with the capability as opaque data; the storage
// server serves bytes for a verified capability.
package xrdkaon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/mgm"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// OpaqueCap is the opaque key carrying the capability in redirects.
const OpaqueCap = "kaon.cap"

// Identify authenticates a root:// login like the HTTP endpoint does: a
// loopback client is the local user owning its socket (the kernel says so,
// not the client's claimed login name); anyone else is nobody.
func Identify(user string, remote, local net.Addr) xrootd.Identity {
	c := mgm.PeerCaller(remote, local)
	return xrootd.Identity{User: user, UID: c.UID, GID: c.GID}
}

func caller(id xrootd.Identity) namespace.Caller {
	return namespace.Caller{UID: id.UID, GID: id.GID}
}

func info(n *namespace.Inode) xrootd.FileInfo {
	fi := xrootd.FileInfo{Name: n.Name, IsDir: n.IsDir, Size: n.Size, Mode: n.Mode, ID: n.ID,
		MTime: time.Unix(0, n.MTime), CTime: time.Unix(0, n.CTime), ATime: time.Unix(0, n.MTime),
		Owner: strconv.FormatUint(uint64(n.UID), 10), Group: strconv.FormatUint(uint64(n.GID), 10)}
	if n.IsDir {
		fi.Size = n.TreeSize
	}
	return fi
}

// Namespace serves the manager listener from the namespace server.
type Namespace struct{ M *mgm.Server }

var _ xrootd.Namespace = Namespace{}

func (n Namespace) ns() *namespace.Namespace { return n.M.Namespace() }

func (n Namespace) Stat(_ context.Context, id xrootd.Identity, p string) (xrootd.FileInfo, error) {
	in, err := n.ns().Stat(caller(id), p)
	if err != nil {
		return xrootd.FileInfo{}, err
	}
	return info(in), nil
}

func (n Namespace) List(_ context.Context, id xrootd.Identity, p string) ([]xrootd.FileInfo, error) {
	ents, err := n.ns().List(caller(id), p)
	if err != nil {
		return nil, err
	}
	out := make([]xrootd.FileInfo, len(ents))
	for i, e := range ents {
		out[i] = info(e)
	}
	return out, nil
}

func (n Namespace) Mkdir(_ context.Context, id xrootd.Identity, p string, mode uint32, parents bool) error {
	if mode == 0 {
		mode = 0o755
	}
	return n.ns().Mkdir(caller(id), p, mode, parents)
}

func (n Namespace) Remove(_ context.Context, id xrootd.Identity, p string) error {
	return n.ns().Remove(caller(id), p)
}

func (n Namespace) Rmdir(_ context.Context, id xrootd.Identity, p string) error {
	return n.ns().Rmdir(caller(id), p)
}

// Rename replaces an existing destination file, as POSIX rename does.
func (n Namespace) Rename(_ context.Context, id xrootd.Identity, from, to string) error {
	return n.ns().Rename(caller(id), from, to, true)
}

func (n Namespace) Chmod(_ context.Context, id xrootd.Identity, p string, mode uint32) error {
	return n.ns().Chmod(caller(id), p, mode)
}

// Truncate supports emptying a file (its data is queued for deletion).
// Files are immutable once committed, so other sizes are refused.
func (n Namespace) Truncate(_ context.Context, id xrootd.Identity, p string, size int64) error {
	in, err := n.ns().Stat(caller(id), p)
	if err != nil {
		return err
	}
	if in.IsDir {
		return kerr.New(kerr.IsDir, "truncate", p, "is a directory")
	}
	switch {
	case size == in.Size:
		return nil
	case size == 0:
		_, err := n.ns().CreateEmpty(caller(id), p, namespace.CreateOptions{Mode: in.Mode})
		return err
	}
	return kerr.New(kerr.Unsupported, "truncate", p, "committed files are immutable; only truncation to 0 is supported")
}

// Checksum answers kXR_query checksum; types the upload did not compute
// are computed now (mgm.EnsureChecksum).
func (n Namespace) Checksum(ctx context.Context, id xrootd.Identity, p, algo string) (string, error) {
	algo = checksumType(algo)
	in, err := n.M.EnsureChecksum(ctx, caller(id), p, algo)
	if err != nil {
		return "", err
	}
	return in.Checksums[algo], nil
}

// checksumType maps an XRootD checksum name to ours (adler32 by default).
func checksumType(algo string) string {
	switch algo {
	case "":
		return "adler32"
	case "sha-256":
		return "sha256"
	}
	return algo
}

func (n Namespace) Locate(_ context.Context, id xrootd.Identity, p string) ([]string, error) {
	in, stripes, err := n.M.FileInfo(caller(id), p)
	if err != nil {
		return nil, err
	}
	if in.IsDir {
		return nil, kerr.New(kerr.IsDir, "locate", p, "is a directory")
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range stripes {
		if a := n.M.XrdAddr(s.Node); a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (n Namespace) StatFS(_ context.Context, id xrootd.Identity, p string) (xrootd.StatFS, error) {
	if _, err := n.ns().Stat(caller(id), p); err != nil {
		return xrootd.StatFS{}, err
	}
	var st xrootd.StatFS
	st.Space = "default"
	for _, f := range n.M.Filesystems() {
		if f.BootStatus != "booted" || f.ConfigStatus != "rw" {
			continue
		}
		st.Filesystems++
		st.Total += f.Capacity
		free := f.Capacity - f.Used
		st.Free += free
		if free > st.MaxFree {
			st.MaxFree = free
		}
	}
	return st, nil
}

func (n Namespace) Open(_ context.Context, id xrootd.Identity, p string, req xrootd.OpenRequest) (xrootd.Redirect, error) {
	c := caller(id)
	var red mgm.Redirect
	var err error
	if req.Write || req.Create || req.Truncate {
		if !req.Create && !req.Truncate {
			if _, err := n.ns().Stat(c, p); err == nil {
				return xrootd.Redirect{}, kerr.New(kerr.Unsupported, "open", p, "committed files are immutable; open with truncate or as new")
			}
		}
		red, err = n.M.OpenWrite(c, p, namespace.CreateOptions{Exclusive: req.Exclusive, Mode: req.Mode}, req.MkPath)
	} else {
		red, _, err = n.M.OpenRead(c, p)
	}
	if err != nil {
		return xrootd.Redirect{}, err
	}
	xa := n.M.XrdAddr(red.Addr)
	if xa == "" {
		return xrootd.Redirect{}, kerr.New(kerr.Unsupported, "open", p, "the storage server holding this file has no root:// endpoint")
	}
	host, port, err := net.SplitHostPort(xa)
	if err != nil {
		return xrootd.Redirect{}, kerr.Wrap(kerr.Internal, "open", p, err)
	}
	pn, _ := strconv.Atoi(port)
	return xrootd.Redirect{Host: host, Port: pn, Opaque: OpaqueCap + "=" + url.QueryEscape(red.Token)}, nil
}

// xrdAdmitWait is how long a root:// open waits for stream memory before
// it is answered with kXR_wait (the client then retries by itself).
const xrdAdmitWait = 5 * time.Second

// Data serves a storage server's root:// listener.
type Data struct {
	S *storage.Server
}

var _ xrootd.DataStore = Data{}

func (d Data) Open(ctx context.Context, id xrootd.Identity, p string, req xrootd.OpenRequest) (xrootd.DataFile, error) {
	clean, err := namespace.CleanPath(p)
	if err != nil {
		return nil, err
	}
	token := req.Opaque.Get(OpaqueCap)
	write := req.Write || req.Create || req.Truncate
	c, err := d.S.Verify(token, capability.Access{Path: clean, Write: write})
	if err != nil {
		return nil, err
	}
	if write {
		u, err := d.S.NewUpload(ctx, c, token, xrdAdmitWait)
		if err != nil {
			return nil, err
		}
		return &writeFile{u: u, c: c}, nil
	}
	f, err := d.S.Open(context.WithoutCancel(ctx), c, token, xrdAdmitWait)
	if err != nil {
		return nil, err
	}
	return &readFile{f: f, c: c}, nil
}

// writeFile is an upload in progress.
type writeFile struct {
	u *storage.Upload
	c *capability.Capability
}

func (w *writeFile) ReadAt([]byte, int64) (int, error) {
	return 0, kerr.New(kerr.Unsupported, "read", w.c.Path, "file is open for writing")
}
func (w *writeFile) WriteAt(p []byte, off int64) (int, error) { return w.u.WriteAt(p, off) }
func (w *writeFile) Truncate(size int64) error {
	if size == w.u.Size() {
		return nil
	}
	return kerr.New(kerr.Unsupported, "truncate", w.c.Path, "uploads are written sequentially")
}
func (w *writeFile) Sync() error { return nil }
func (w *writeFile) Stat() (xrootd.FileInfo, error) {
	now := time.Now()
	return xrootd.FileInfo{Name: baseName(w.c.Path), Size: w.u.Size(), Mode: 0o644, ID: w.c.Fid, MTime: now, CTime: now, ATime: now}, nil
}
func (w *writeFile) Checksum(string) (string, error) {
	return "", kerr.New(kerr.Busy, "checksum", w.c.Path, "upload not finished")
}
func (w *writeFile) Close() error { return w.u.Commit(context.Background()) }
func (w *writeFile) Abort() error { w.u.Abort(context.Background()); return nil }

// readFile is a committed file open for reading.
type readFile struct {
	f storage.File
	c *capability.Capability
}

func (r *readFile) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(p, off) }
func (r *readFile) WriteAt([]byte, int64) (int, error) {
	return 0, kerr.New(kerr.ReadOnly, "write", r.c.Path, "file is open for reading")
}
func (r *readFile) Truncate(int64) error {
	return kerr.New(kerr.ReadOnly, "truncate", r.c.Path, "file is open for reading")
}
func (r *readFile) Sync() error { return nil }
func (r *readFile) Stat() (xrootd.FileInfo, error) {
	now := time.Now()
	return xrootd.FileInfo{Name: baseName(r.c.Path), Size: r.c.Size, Mode: 0o644, ID: r.c.Fid, MTime: now, CTime: now, ATime: now}, nil
}

// Checksum answers kXR_query checksum on the open file: from the record,
// or computed now from the data when the upload did not compute the type.
func (r *readFile) Checksum(algo string) (string, error) {
	typ := checksumType(algo)
	if v := r.c.Sums[typ]; v != "" {
		return v, nil
	}
	if !checksum.Valid(typ) {
		return "", kerr.New(kerr.Unsupported, "checksum", r.c.Path, fmt.Sprintf("unknown checksum type %q", typ))
	}
	v, bad, _, err := checksum.Recompute(io.NewSectionReader(r.f, 0, r.c.Size), typ, r.c.Sums)
	switch {
	case err != nil:
		return "", kerr.Wrap(kerr.IO, "checksum", r.c.Path, err)
	case bad != "":
		return "", kerr.New(kerr.IO, "checksum", r.c.Path, "stored data does not match the "+bad+" recorded at write time")
	}
	return v, nil
}
func (r *readFile) Close() error { return r.f.Close() }
func (r *readFile) Abort() error { return r.f.Close() }

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
