package xrootd

// XRootD third-party copy: the tpc.* opaque protocol as xrdcp 5.5 drives
// it with --tpc only|first. The client
//
//  1. opens the source (tpc.stage=placement) to learn its data server and
//     size, and closes it;
//  2. opens the destination for writing with tpc.key=K (a random secret it
//     made), tpc.src=<source data server host:port>, tpc.lfn=<source
//     path>, tpc.stage=copy, oss.asize=<size>;
//  3. syncs the destination once (the rendezvous is set up);
//  4. opens the source for reading with tpc.key=K and tpc.dst=<destination
//     host>: the source registers K for that path, that destination host
//     and the client ("user.pid@host", its origin);
//  5. syncs the destination again: the destination opens the source with
//     tpc.key=K and tpc.org=<the client's origin as the destination saw it>,
//     the source matches that against what was registered (key, origin,
//     path, the connecting host), and the destination pulls the bytes;
//     the sync returns when the copy is done;
//  6. closes both (the destination's close commits).
//
// Here: a data listener answers kXR_Qconfig "tpc" with 1; registrations
// (step 4) are kept per server for tpc.ttl (default and at most
// tpcMaxTTL) and used once; a source open carrying tpc.org waits up to
// tpcWait for its registration and is then served with the capability the
// origin's open carried (the destination never holds one); a destination
// open is wrapped so that its second sync runs Config.TPC.Pull. A listener
// without Config.TPC can still be a source.

import (
	"context"
	"encoding/binary"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// The tpc.* opaque keys.
const (
	TPCKey   = "tpc.key"
	TPCDst   = "tpc.dst"
	TPCOrg   = "tpc.org"
	TPCSrc   = "tpc.src"
	TPCLfn   = "tpc.lfn"
	TPCCks   = "tpc.cks"
	TPCTTL   = "tpc.ttl"
	TPCStage = "tpc.stage"
	TPCStr   = "tpc.str"
)

const (
	tpcWait       = 30 * time.Second // a source open waits this long for its registration
	tpcDefaultTTL = 2 * time.Minute
	tpcMaxTTL     = 15 * time.Minute
)

// TPCJob is a copy a destination runs: what the client's tpc.* opaque and
// the origin say. Key is a secret: never log it.
type TPCJob struct {
	Key     string
	Src     string // source data server, [user@]host:port
	Lfn     string // path to open there
	Org     string // the client as "user.pid@host", sent as tpc.org
	Cks     string // tpc.cks ("type" or "type:value"), "" when none
	Path    string // the destination file
	Size    int64  // oss.asize, -1 when not given
	Streams int    // tpc.str, 0 when not given
}

// TPCPuller runs the destination side of a copy.
type TPCPuller interface {
	// Pull copies the source job names into df (open for writing) and
	// returns when the bytes are in; the client's close commits df.
	Pull(ctx context.Context, job TPCJob, df DataFile) error
}

// tpcGrant is a source-side registration (step 4).
type tpcGrant struct {
	org, lfn, dst string
	originIP      string
	opaque        url.Values // the origin open's opaque, tpc.* removed (it carries the capability)
	expires       time.Time
}

type tpcRegistry struct {
	mu     sync.Mutex
	grants map[string]*tpcGrant // by key
	added  chan struct{}        // closed and replaced on every registration
}

func (r *tpcRegistry) changed() chan struct{} {
	if r.added == nil {
		r.added = make(chan struct{})
	}
	return r.added
}

// register records an origin's authorization.
func (r *tpcRegistry) register(key string, g *tpcGrant) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.grants == nil {
		r.grants = map[string]*tpcGrant{}
	}
	now := time.Now()
	for k, old := range r.grants {
		if now.After(old.expires) {
			delete(r.grants, k)
		}
	}
	if _, dup := r.grants[key]; dup {
		delete(r.grants, key) // a replayed key: neither may be used
		return kerr.New(kerr.Permission, "open", g.lfn, "duplicate tpc authorization")
	}
	r.grants[key] = g
	close(r.changed())
	r.added = make(chan struct{})
	return nil
}

// take waits for key's registration and removes it (single use).
func (r *tpcRegistry) take(ctx context.Context, key string) *tpcGrant {
	deadline := time.NewTimer(tpcWait)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		g := r.grants[key]
		if g != nil {
			delete(r.grants, key)
		}
		ch := r.changed()
		r.mu.Unlock()
		if g != nil {
			if time.Now().After(g.expires) {
				return nil
			}
			return g
		}
		select {
		case <-ch:
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// decodeLoginPID is the client's process id in a kXR_login request.
func decodeLoginPID(h *reqHeader) int32 { return int32(binary.BigEndian.Uint32(h.Params[0:4])) }

// tpcTTL is the lifetime the origin asked for, bounded.
func tpcTTL(opaque url.Values) time.Duration {
	if n, err := strconv.Atoi(opaque.Get(TPCTTL)); err == nil && n > 0 {
		return min(time.Duration(n)*time.Second, tpcMaxTTL)
	}
	return tpcDefaultTTL
}

// origin is how this connection's client is named in tpc.org:
// "<login user>.<login pid>@<host name>".
func (c *conn) origin() string {
	user, pid := "nobody", int32(0)
	if c.sess != nil {
		user = c.sess.ident.User
		c.sess.mu.Lock()
		if len(c.sess.paths) > 0 && c.sess.paths[0] != nil {
			pid = c.sess.paths[0].loginPID
		}
		c.sess.mu.Unlock()
	}
	return user + "." + strconv.Itoa(int(pid)) + "@" + originHost(c.host)
}

// originHost names a client's host as xrootd servers name it in tpc.org
// (they compare the text): its DNS name, else (and always for loopback,
// which xrootd's dual-stack sockets see as IPv4-mapped IPv6 without a
// name) the bracketed IPv6 form of its address.
func originHost(ip string) string {
	a := net.ParseIP(ip)
	if a == nil {
		return ip
	}
	if !a.IsLoopback() {
		if names, err := net.LookupAddr(ip); err == nil && len(names) > 0 {
			return strings.TrimSuffix(names[0], ".")
		}
	}
	if v4 := a.To4(); v4 != nil {
		return "[::ffff:" + v4.String() + "]"
	}
	return "[" + a.String() + "]"
}

// hostName is the name of ip (its first reverse name), else ip itself.
func hostName(ip string) string {
	if names, err := net.LookupAddr(ip); err == nil && len(names) > 0 {
		return strings.TrimSuffix(names[0], ".")
	}
	return ip
}

// hostIs reports whether the peer at ip is host (a name or an address).
func hostIs(host, ip string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a := net.ParseIP(host); a != nil {
		return a.Equal(net.ParseIP(ip))
	}
	if strings.EqualFold(host, hostName(ip)) {
		return true
	}
	addrs, err := net.LookupHost(host)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if net.ParseIP(a).Equal(net.ParseIP(ip)) {
			return true
		}
	}
	return false
}

// orgMatches compares the origin a destination names with the one the
// source registered: same login user and pid, same host (by name or
// address: each side names the client as it resolves it).
func orgMatches(registered, originIP, given string) bool {
	ru, _, ok1 := strings.Cut(registered, "@")
	gu, gh, ok2 := strings.Cut(given, "@")
	return ok1 && ok2 && ru == gu && hostIs(gh, originIP)
}

// tpcOpaque is opaque without the tpc.* keys.
func tpcOpaque(opaque url.Values) url.Values {
	out := url.Values{}
	for k, vs := range opaque {
		if !strings.HasPrefix(k, "tpc.") {
			out[k] = vs
		}
	}
	return out
}

// tpcSourceOpen prepares an open by a destination pulling from this data
// server (tpc.key and tpc.org): it waits for the origin's registration,
// checks it and replaces req's opaque by the origin's (with its
// capability). It reports whether the open is one.
func (c *conn) tpcSourceOpen(ctx context.Context, p string, req *OpenRequest) (bool, error) {
	key, org := req.Opaque.Get(TPCKey), req.Opaque.Get(TPCOrg)
	if key == "" || org == "" {
		return false, nil
	}
	if req.Opaque.Get(TPCDst) != "" {
		return true, kerr.New(kerr.Invalid, "open", p, "conflicting tpc opaque (both tpc.org and tpc.dst)")
	}
	if req.Write {
		return true, kerr.New(kerr.Invalid, "open", p, "a tpc source is opened for reading")
	}
	if c.srv.cfg.Data == nil {
		return true, kerr.New(kerr.Unsupported, "open", p, "tpc sources are opened at their data server")
	}
	g := c.srv.tpc.take(ctx, key)
	switch {
	case g == nil:
		return true, kerr.New(kerr.Permission, "open", p, "no tpc authorization for this key (expired or never registered)")
	case g.lfn != p:
		return true, kerr.New(kerr.Permission, "open", p, "tpc authorization is for another file")
	case !hostIs(g.dst, c.host):
		return true, kerr.New(kerr.Permission, "open", p, "tpc authorization is for another destination host")
	case !orgMatches(g.org, g.originIP, org):
		return true, kerr.New(kerr.Permission, "open", p, "tpc authorization is for another origin")
	}
	req.Opaque = g.opaque
	return true, nil
}

// tpcOpened runs after a data open succeeded: an origin's read open with
// tpc.key and tpc.dst registers its authorization; a write open with
// tpc.key and tpc.src becomes a copy job. It returns the file to use.
func (c *conn) tpcOpened(p string, req OpenRequest, df DataFile) (DataFile, error) {
	key := req.Opaque.Get(TPCKey)
	if key == "" || req.Opaque.Get(TPCOrg) != "" {
		return df, nil
	}
	if dst := req.Opaque.Get(TPCDst); dst != "" && !req.Write {
		err := c.srv.tpc.register(key, &tpcGrant{org: c.origin(), originIP: c.host, lfn: p, dst: dst,
			opaque: tpcOpaque(req.Opaque), expires: time.Now().Add(tpcTTL(req.Opaque))})
		return df, err
	}
	src := req.Opaque.Get(TPCSrc)
	if src == "" || !req.Write {
		return df, nil
	}
	if c.srv.cfg.TPC == nil {
		return df, kerr.New(kerr.Unsupported, "open", p, "tpc not supported by this server")
	}
	job := TPCJob{Key: key, Src: src, Lfn: req.Opaque.Get(TPCLfn), Org: c.origin(), Cks: req.Opaque.Get(TPCCks), Path: p, Size: -1}
	if job.Lfn == "" {
		job.Lfn = p
	}
	if n, err := strconv.ParseInt(req.Opaque.Get("oss.asize"), 10, 64); err == nil && n >= 0 {
		job.Size = n
	}
	job.Streams, _ = strconv.Atoi(req.Opaque.Get(TPCStr))
	return &tpcDest{DataFile: df, job: job, puller: c.srv.cfg.TPC, ctx: c.ctx}, nil
}

// tpcDest is a destination file of a copy: the first sync sets up the
// rendezvous, the second runs the pull and returns when it is done.
type tpcDest struct {
	DataFile
	job    TPCJob
	puller TPCPuller
	ctx    context.Context // the connection's: a client gone cancels the copy

	mu    sync.Mutex
	syncs int
	ran   bool
	err   error
}

func (t *tpcDest) Sync() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.syncs++
	switch {
	case t.syncs == 1:
		return nil
	case !t.ran:
		t.ran = true
		t.err = t.puller.Pull(t.ctx, t.job, t.DataFile)
	}
	return t.err
}

// Close commits the copied file, or discards it when the copy failed or
// never ran.
func (t *tpcDest) Close() error {
	t.mu.Lock()
	ran, err := t.ran, t.err
	t.mu.Unlock()
	if !ran {
		err = kerr.New(kerr.IO, "close", t.job.Path, "third-party copy was never started (no second sync)")
	}
	if err != nil {
		t.DataFile.Abort()
		return err
	}
	return t.DataFile.Close()
}
