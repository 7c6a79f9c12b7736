package mount

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/gateway"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Identity per calling process. Every request the mount makes for a
// caller carries the caller's own credential, never the daemon's:
//
//   - the caller's bearer token, found as WLCG Bearer Token Discovery
//     says in that process's environment (/proc/PID/environ):
//     BEARER_TOKEN, then the file BEARER_TOKEN_FILE, then
//     $XDG_RUNTIME_DIR/bt_u$UID, then /tmp/bt_u$UID. Files are read with
//     the caller's file system identity (fusecore.Enter), so a caller
//     cannot make the daemon read a file it could not read itself;
//   - and its connections are made with the caller's uid (the socket is
//     created under the caller's fsuid), so a namespace server on the
//     same host that accepts unix peers sees the caller's own uid, as it
//     would for curl run by that process; the caller's pid goes with
//     each request (nsapi.CallerPidHeader), and the server takes that
//     process's gid and supplementary groups when its file system uid is
//     the socket's owner (auth.ProcessGroups). A caller with no token talking
//     to a server elsewhere has no credential: it is refused or nobody,
//     as the server decides.
//
// On a gateway host (Options.Gateway: a key the namespace servers trust,
// auth/gateway) the mount asserts instead, per request, the caller's uid,
// its file system gid and its supplementary groups (/proc/PID/status),
// signed with the key; tokens are not looked for. The servers squash
// uid 0 to nobody unless they trust the key with no_root_squash.

// tokenTTL is how long a process's discovered token is reused.
const tokenTTL = time.Second

type tokenEntry struct {
	uid     uint32
	token   string
	expires time.Time
}

type identities struct {
	url     string
	servers []string      // the instance's other namespace servers
	gw      *gateway.Key  // the gateway key (nil: not a gateway)
	timeout time.Duration // for a server's answer (ResponseHeaderTimeout)
	mu      sync.Mutex
	tok     map[uint32]tokenEntry      // by pid
	cl      map[string]*client.Client  // by uid and token
	tr      map[uint32]*http.Transport // by uid
	grp     map[uint32]groupsEntry     // a gateway's callers' groups, by pid
}

func newIdentities(o Options) *identities {
	return &identities{url: o.URL, servers: o.Servers, gw: o.Gateway, timeout: o.Timeout,
		tok: map[uint32]tokenEntry{}, cl: map[string]*client.Client{}, tr: map[uint32]*http.Transport{}}
}

// client is the client acting as the caller of ctx's FUSE request.
func (ids *identities) client(ctx context.Context) *client.Client {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		c = &fuse.Caller{Owner: fuse.Owner{Uid: 65534, Gid: 65534}}
	}
	return ids.clientOf(c)
}

func (ids *identities) clientOf(c *fuse.Caller) *client.Client {
	var tok, key string
	var pid, gid uint32
	var groups []uint32
	if ids.gw != nil {
		// A gateway asserts the caller's uid and its process's groups.
		gid, groups = ids.groups(c)
		key = fmt.Sprint("gw ", c.Uid, gid, groups)
	} else {
		tok = ids.token(c)
		// Without a token the caller is its socket's owner (a unix peer)
		// and its groups are its process's: the server reads them from
		// the pid.
		if tok == "" {
			pid = c.Pid
		}
		key = strconv.FormatUint(uint64(c.Uid), 10) + "\x00" + tok + "\x00" + strconv.FormatUint(uint64(pid), 10)
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if cl := ids.cl[key]; cl != nil {
		return cl
	}
	// Sockets are the caller's even on a gateway: a server on this host
	// that ignored the assertion would see the caller, not the daemon.
	tr := ids.tr[c.Uid]
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = dialAs(c.Uid, c.Gid)
		tr.MaxIdleConnsPerHost = 16
		tr.ResponseHeaderTimeout = ids.timeout
		ids.tr[c.Uid] = tr
	}
	if len(ids.cl) > 4096 {
		clear(ids.cl)
	}
	cl := client.New(ids.url)
	cl.Servers = ids.servers
	cl.HTTP = &http.Client{Transport: tr}
	if ids.gw != nil {
		cl.Assert = asserting(ids.gw, c.Uid, gid, groups)
	} else {
		cl.Token = tok
		cl.CallerPid = pid
	}
	ids.cl[key] = cl
	return cl
}

// asserting is a client.Client's Assert hook asserting uid, gid and
// groups with gateway key k.
func asserting(k *gateway.Key, uid, gid uint32, groups []uint32) func(*http.Request) {
	return func(r *http.Request) {
		r.Header.Set(gateway.Header, k.Assert(r.Method, r.URL.RequestURI(), uid, gid, groups))
	}
}

type groupsEntry struct {
	uid, gid uint32
	groups   []uint32
	expires  time.Time
}

// groups are the file system gid and the supplementary groups of c's
// process (read again after tokenTTL).
func (ids *identities) groups(c *fuse.Caller) (uint32, []uint32) {
	now := time.Now()
	ids.mu.Lock()
	e, ok := ids.grp[c.Pid]
	ids.mu.Unlock()
	if ok && e.uid == c.Uid && now.Before(e.expires) {
		return e.gid, e.groups
	}
	gid, groups, ok := auth.ProcessIDs(c.Pid, c.Uid)
	if !ok || c.Pid == 0 {
		gid, groups = c.Gid, nil
	}
	ids.mu.Lock()
	if ids.grp == nil || len(ids.grp) > 4096 {
		ids.grp = map[uint32]groupsEntry{}
	}
	ids.grp[c.Pid] = groupsEntry{c.Uid, gid, groups, now.Add(tokenTTL)}
	ids.mu.Unlock()
	return gid, groups
}

// token is the bearer token of the calling process ("" for none). The
// open of /proc/PID/environ waits while that process is in exec (its
// exec_update_lock): never look for it for a request the kernel can send
// from an exec — the close of an O_CLOEXEC descriptor (FLUSH, and the
// times of a file written back, which Setattr answers as the open file).
func (ids *identities) token(c *fuse.Caller) string {
	now := time.Now()
	ids.mu.Lock()
	e, ok := ids.tok[c.Pid]
	ids.mu.Unlock()
	if ok && e.uid == c.Uid && now.Before(e.expires) {
		return e.token
	}
	tok := ""
	if c.Pid != 0 {
		if env, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(c.Pid), 10) + "/environ"); err == nil {
			tok = discoverToken(parseEnviron(env), c.Uid, func(p string) ([]byte, uint32, error) {
				cr := fusecore.Enter(c)
				defer cr.Leave()
				f, err := os.Open(p)
				if err != nil {
					return nil, 0, err
				}
				defer f.Close()
				var st unix.Stat_t
				if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
					return nil, 0, os.ErrNotExist
				}
				b, err := io.ReadAll(io.LimitReader(f, 64<<10))
				return b, st.Uid, err
			})
		}
	}
	ids.mu.Lock()
	if len(ids.tok) > 4096 {
		clear(ids.tok)
	}
	ids.tok[c.Pid] = tokenEntry{c.Uid, tok, now.Add(tokenTTL)}
	ids.mu.Unlock()
	return tok
}

func parseEnviron(b []byte) map[string]string {
	env := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env
}

// discoverToken follows WLCG Bearer Token Discovery over env for user
// uid: the first place that holds a token wins; read reads a file and
// tells its owner. The two well-known files are taken only when uid owns
// them (anyone can write to /tmp), as the CLI does.
func discoverToken(env map[string]string, uid uint32, read func(string) ([]byte, uint32, error)) string {
	if t := strings.TrimSpace(env["BEARER_TOKEN"]); t != "" {
		return t
	}
	type place struct {
		path string
		own  bool // must be uid's
	}
	var places []place
	if f := env["BEARER_TOKEN_FILE"]; f != "" {
		places = append(places, place{f, false})
	}
	u := strconv.FormatUint(uint64(uid), 10)
	if d := env["XDG_RUNTIME_DIR"]; d != "" {
		places = append(places, place{d + "/bt_u" + u, true})
	}
	places = append(places, place{"/tmp/bt_u" + u, true})
	for _, p := range places {
		b, owner, err := read(p.path)
		if err != nil || (p.own && owner != uid) {
			continue
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t
		}
	}
	return ""
}

var isRoot = os.Geteuid() == 0

// dialAs dials with sockets owned by uid/gid: a socket's owner is the
// file system uid of the thread that creates it, which a namespace
// server on this host reads back (sock_diag) as the peer's identity.
// Happy-eyeballs fallback is off, so the socket is made on this thread.
func dialAs(uid, gid uint32) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, FallbackDelay: -1}
	if !isRoot || uid == 0 {
		return d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
		unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
		defer func() {
			unix.RawSyscall(unix.SYS_SETFSUID, 0, 0, 0)
			unix.RawSyscall(unix.SYS_SETFSGID, 0, 0, 0)
		}()
		return d.DialContext(ctx, network, addr)
	}
}

// squashedDenies says whether a root caller of a gateway mount whose
// root the servers squash (f.squash: who root is to them) lacks the
// access open flags ask for to a file of attributes a. The kernel lets
// root open any file (default_permissions) and a file's pages may be
// cached already, so without this root would read through the cache
// what the servers refuse it.
func (f *FS) squashedDenies(ctx context.Context, a nsapi.Attr, flags uint32) bool {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Uid != 0 || f.squash == nil {
		return false
	}
	want := uint32(4)
	switch flags & syscall.O_ACCMODE {
	case syscall.O_WRONLY:
		want = 2
	case syscall.O_RDWR:
		want = 6
	}
	w := f.squash
	bits := a.Mode
	switch {
	case a.UID == w.UID:
		bits >>= 6
	case a.GID == w.GID || slices.Contains(w.Groups, a.GID):
		bits >>= 3
	}
	return bits&want != want
}
