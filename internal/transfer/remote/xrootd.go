package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/transfer"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// XRootD makes root:// sources under one Policy: every address the
// client connects to (the source, and any redirect) is resolved and
// checked by it, then dialled as an IP, so the client cannot be steered
// elsewhere by a second resolution.
type XRootD struct {
	Policy *Policy
	User   string // login name (default "kaon")
	// Auth are the security protocols the client logs in with when a
	// source asks for them (gsi with the host certificate); otherwise,
	// and when none is offered that it has, unix.
	Auth []xrootd.ClientAuth
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
	dial := func(ctx context.Context, hostport string) (net.Conn, error) {
		addr, err := s.x.Policy.Resolve(ctx, hostport)
		if err != nil {
			return nil, err
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	cli, err := xrootd.Dial(ctx, s.hostport, xrootd.ClientConfig{User: s.x.User, Dial: dial, Auth: s.x.Auth})
	if err != nil {
		var ke *kerr.Error
		if errors.As(err, &ke) { // refused by the policy
			return nil, err
		}
		return nil, kerr.Wrap(kerr.Unavailable, "connect", s.String(), err)
	}
	p := s.path
	if s.opaque != "" {
		p += "?" + s.opaque
	}
	f, err := cli.OpenRead(ctx, p)
	if err != nil {
		cli.Close()
		return nil, xrdError("open", s.String(), err)
	}
	chunk, depth := s.x.Chunk, s.x.Depth
	if chunk <= 0 {
		chunk = 2 << 20
	}
	if depth <= 0 {
		depth = 4
	}
	r := &xrdReader{ctx: ctx, cli: cli, f: f, size: f.Size, sums: s.sums, name: s.String(), chunk: chunk}
	for i := 0; i < depth; i++ {
		r.issue()
	}
	return r, nil
}

// xrdReader reads the file in order with depth requests in flight.
type xrdReader struct {
	ctx   context.Context
	cli   *xrootd.Client
	f     *xrootd.RemoteFile
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
		got, err := r.f.ReadAt(r.ctx, b, off)
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
	r.f.Conn().Close() // the redirect's target, if any
	r.cli.Close()
	return err
}

func (r *xrdReader) Size() int64                  { return r.size }
func (r *xrdReader) Checksums() map[string]string { return r.sums }

// xrdError maps a root:// error to a Kaon error naming the remote.
func xrdError(op, name string, err error) error {
	k := kerr.IO
	var se *xrootd.ServerError
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke): // the policy refused a redirect
		k = ke.Kind
	case errors.As(err, &se) && se.NotFound():
		k = kerr.NotFound
	case errors.As(err, &se) && se.NotAuthorized(), strings.Contains(err.Error(), "authentication failed"):
		k = kerr.Permission
	}
	return kerr.Wrap(k, op, name, err)
}
