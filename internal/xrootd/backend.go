package xrootd

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"
)

// Identity is who a session acts as: the username from kXR_login and the
// client's host. UID/GID come from Config.Identify (default: local passwd
// lookup, nobody when unknown).
type Identity struct {
	User     string
	UID, GID uint32
	Host     string
	// Principal is whatever the embedding server's IdentifyConn attached
	// (its own notion of an authenticated client); the protocol ignores it.
	Principal any
	// Err, when IdentifyConn sets it, refuses every request of the
	// session with kXR_NotAuthorized and this message (XrdCl does not show
	// the message of a refused login, only that it failed).
	Err error
}

// FileInfo is what the protocol needs to answer stat, dirlist and open.
type FileInfo struct {
	Name                string
	IsDir               bool
	Size                int64
	Mode                uint32 // permission bits
	MTime, CTime, ATime time.Time
	ID                  uint64
	Owner, Group        string
}

// StatFS describes the space behind a path (kXR_stat+kXR_vfs, kXR_Qspace).
type StatFS struct {
	Total, Free uint64
	Filesystems int
	// Space names the space/group reported as oss.cgroup (default "default").
	Space string
	// MaxFree is the largest free chunk on one filesystem (0: use Free).
	MaxFree uint64
	// Quota in bytes, -1 or 0 for none.
	Quota int64
}

// OpenRequest is the decoded kXR_open intent.
type OpenRequest struct {
	Read, Write, Create, Truncate, Exclusive, MkPath, POSC bool
	Mode                                                   uint32
	Opaque                                                 url.Values
}

// Redirect tells the client where to go for data.
type Redirect struct {
	Host   string
	Port   int
	Opaque string // query without '?' appended to the path, e.g. "kaon.cap=..."
}

// RedirectError, returned by a Namespace method, answers the request with
// a redirect to another manager instead of an error: a standby namespace
// server sends every client to the active one.
type RedirectError struct {
	Host string
	Port int
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("served by the manager at %s", net.JoinHostPort(e.Host, strconv.Itoa(e.Port)))
}

// Namespace is served at the manager (namespace) listener.
type Namespace interface {
	Stat(ctx context.Context, id Identity, path string) (FileInfo, error)
	List(ctx context.Context, id Identity, path string) ([]FileInfo, error) // sorted by name
	Mkdir(ctx context.Context, id Identity, path string, mode uint32, parents bool) error
	Remove(ctx context.Context, id Identity, path string) error
	Rmdir(ctx context.Context, id Identity, path string) error
	Rename(ctx context.Context, id Identity, from, to string) error
	Chmod(ctx context.Context, id Identity, path string, mode uint32) error
	Truncate(ctx context.Context, id Identity, path string, size int64) error
	Checksum(ctx context.Context, id Identity, path, algo string) (string, error) // lowercase hex
	Locate(ctx context.Context, id Identity, path string) ([]string, error)       // host:port of data servers
	StatFS(ctx context.Context, id Identity, path string) (StatFS, error)
	Open(ctx context.Context, id Identity, path string, req OpenRequest) (Redirect, error)
}

// DataStore is served at a data (storage server) listener.
type DataStore interface {
	// Open verifies the capability carried in req.Opaque.
	Open(ctx context.Context, id Identity, path string, req OpenRequest) (DataFile, error)
}

// DataFile is one open file at a storage server.
type DataFile interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error) // may be called out of order and concurrently
	Truncate(size int64) error
	Sync() error
	Stat() (FileInfo, error)
	Checksum(algo string) (string, error)
	Close() error // for a written file: commits
	Abort() error // abandoned upload: discard, nothing visible
}

// Config configures a Server. Zero limits take sane defaults.
type Config struct {
	Namespace Namespace // nil on a data-only listener: namespace requests redirect to Manager
	Data      DataStore // nil on a manager-only listener
	Manager   string    // host:port of the manager, for redirects from a data listener
	// CapabilityOpaque names the opaque key that carries the capability
	// (default "kaon.cap"). A data listener redirects an open without it to
	// the Manager, which mints one, so root://dataserver//path works too.
	CapabilityOpaque string
	Logger           *slog.Logger

	// Identify maps a login (username, client host) to an Identity. Default:
	// local passwd lookup, uid/gid 65534 when the user is unknown.
	Identify func(user, host string) Identity
	// IdentifyConn, when set, takes precedence over Identify and sees the
	// connection's addresses, so an embedding server can authenticate a
	// loopback peer by who owns its socket instead of trusting the login name.
	IdentifyConn func(user string, remote, local net.Addr) Identity

	// TLS lets clients switch connections to TLS in kXR_protocol (roots://;
	// security.go). RequireTLS refuses login and bind on connections that
	// did not switch.
	TLS        *tls.Config
	RequireTLS bool
	// Security are the security protocols a namespace listener's logins
	// offer, in this order (then unix: a client without their credentials
	// is who IdentifyConn says); security.go.
	Security []SecProtocol

	MaxFrame     int   // largest request body held in memory (default 16 MiB + 64 KiB); bigger kXR_write data is streamed
	MaxSessions  int   // concurrent sessions (default 4096)
	MaxOpenFiles int   // open handles per session (default 16384)
	ConnBudget   int64 // bytes of request/response buffers in flight per connection (default 64 MiB)
	GlobalBudget int64 // same, for the whole server (default 1 GiB)
	MaxInflight  int   // concurrently handled requests per connection (default 64)
	// PageChecksums advertises kXR_suppgrw, which makes 5.5 clients read
	// with kXR_pgread (a CRC32C per 4 KiB page, computed here and verified
	// by the client). Off by default: xrdcp --cksum already verifies end to
	// end and plain kXR_read is ~2.5x faster on loopback. kXR_pgread and
	// kXR_pgwrite are served either way (xrdcp always uploads with pgwrite,
	// whose CRCs are always verified).
	PageChecksums bool
	// TPC runs the destination side of third-party copies (tpc.go) on a
	// data listener; nil: this server can be a TPC source only.
	TPC TPCPuller
	// IdleTimeout drops a connection that sends nothing for this long
	// (default 30 min; clients reconnect transparently).
	IdleTimeout time.Duration
}
