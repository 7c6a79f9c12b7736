package remote

import (
	"context"
	"fmt"
	"io"
	"strings"

	"go-hep.org/x/hep/xrootd"
	"go-hep.org/x/hep/xrootd/xrdfs"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// XRootD makes root:// sources under one Policy (the address is resolved
// and checked here, then handed to the client as an IP, so the client
// cannot be steered elsewhere by a second resolution).
type XRootD struct {
	Policy *Policy
	User   string // login name (default "kaon")
	// Chunk and Depth shape the reads: Depth requests of Chunk bytes in
	// flight (defaults 2 MiB and 4).
	Chunk int
	Depth int
}

// Source is path at the root:// server hostport ([user@]host:port),
// opened with opaque (without '?'; it may carry secrets such as tpc.key
// and is never shown). sums are checksums a third party vouches for (e.g.
// tpc.cks), or nil.
func (x *XRootD) Source(hostport, path, opaque string, sums map[string]string) transfer.Source {
	if i := strings.LastIndexByte(hostport, '@'); i >= 0 {
		hostport = hostport[i+1:]
	}
	return &xrdSource{x: x, hostport: hostport, path: "/" + strings.TrimLeft(path, "/"), opaque: opaque, sums: sums}
}

type xrdSource struct {
	x        *XRootD
	hostport string
	path     string
	opaque   string
	sums     map[string]string
}

func (s *xrdSource) String() string { return "root://" + s.hostport + "/" + s.path }

func (s *xrdSource) Open(ctx context.Context) (transfer.Reader, error) {
	addr, err := s.x.Policy.Resolve(ctx, s.hostport)
	if err != nil {
		return nil, err
	}
	user := s.x.User
	if user == "" {
		user = "kaon"
	}
	cli, err := xrootd.NewClient(ctx, addr, user)
	if err != nil {
		return nil, kerr.Wrap(kerr.Unavailable, "connect", s.String(), err)
	}
	p := s.path
	if s.opaque != "" {
		p += "?" + s.opaque
	}
	// The size comes with the open (kXR_retstat): a stat of the handle
	// is refused by xrootd 5.5 as go-hep encodes it.
	f, err := cli.FS().Open(ctx, p, xrdfs.OpenModeOwnerRead, xrdfs.OpenOptionsOpenRead|xrdfs.OpenOptionsReturnStatus)
	if err != nil {
		cli.Close()
		return nil, xrdError("open", s.String(), err)
	}
	st := f.Info()
	if st == nil {
		f.Close(ctx)
		cli.Close()
		return nil, kerr.New(kerr.IO, "open", s.String(), "the server did not return the file's size")
	}
	chunk, depth := s.x.Chunk, s.x.Depth
	if chunk <= 0 {
		chunk = 2 << 20
	}
	if depth <= 0 {
		depth = 4
	}
	r := &xrdReader{ctx: ctx, cli: cli, f: f, size: st.EntrySize, sums: s.sums, name: s.String(), chunk: chunk}
	for i := 0; i < depth; i++ {
		r.issue()
	}
	return r, nil
}

// xrdReader reads the file in order with depth requests in flight.
type xrdReader struct {
	ctx   context.Context
	cli   *xrootd.Client
	f     xrdfs.File
	size  int64
	sums  map[string]string
	name  string
	chunk int

	next    int64          // offset of the next request to issue
	pending []chan readRes // in order
	cur     []byte
	err     error
}

type readRes struct {
	b   []byte
	err error
}

func (r *xrdReader) issue() {
	if r.next >= r.size {
		return
	}
	n := int64(r.chunk)
	if r.size-r.next < n {
		n = r.size - r.next
	}
	off := r.next
	r.next += n
	ch := make(chan readRes, 1)
	r.pending = append(r.pending, ch)
	go func() {
		b := make([]byte, n)
		got, err := r.f.ReadAtContext(r.ctx, b, off)
		if err == nil && int64(got) != n {
			err = fmt.Errorf("short read at %d: %d of %d bytes", off, got, n)
		}
		ch <- readRes{b[:got], err}
	}()
}

func (r *xrdReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if len(r.pending) == 0 {
			return 0, io.EOF
		}
		res := <-r.pending[0]
		r.pending = r.pending[1:]
		if res.err != nil {
			r.err = xrdError("read", r.name, res.err)
			return 0, r.err
		}
		r.cur = res.b
		r.issue()
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *xrdReader) Close() error {
	for _, ch := range r.pending {
		<-ch
	}
	r.pending = nil
	err := r.f.Close(context.WithoutCancel(r.ctx))
	r.cli.Close()
	return err
}

func (r *xrdReader) Size() int64                  { return r.size }
func (r *xrdReader) Checksums() map[string]string { return r.sums }

// xrdError maps a root:// error to a Kaon error naming the remote.
func xrdError(op, name string, err error) error {
	msg := err.Error()
	k := kerr.IO
	switch {
	case strings.Contains(msg, "kXR_NotFound") || strings.Contains(strings.ToLower(msg), "no such file"):
		k = kerr.NotFound
	case strings.Contains(msg, "kXR_NotAuthorized") || strings.Contains(strings.ToLower(msg), "permission denied") ||
		strings.Contains(strings.ToLower(msg), "authorization"):
		k = kerr.Permission
	}
	return kerr.Wrap(k, op, name, err)
}
