package nsapi

import (
	"errors"
	"io"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Client sessions (EOS: fusex clients). A client that caches the
// namespace (the caching mount, or any program) opens a session with the
// namespace service over one streaming channel (SessionPath, a WebSocket
// or HTTP/2):
// it sends SessionRequests (open, heartbeat, subscribe, lock, ...) as a
// stream of JSON values and receives SessionMessages: the replies to its
// requests, and the invalidations the service pushes. One stream may
// carry several sessions (SessionRequest.S names which), so a load
// generator or a gateway can hold many over few connections.
//
// The channel is lossy by nature. Every pushed message of a session has
// the next sequence number (Seq, from 1); a client that sees a gap, a
// SessionFull message, another Term, or whose stream broke, drops
// everything it caches for that session and reads again.

// SessionPath is the session channel's route on a namespace server's
// HTTP endpoint (a WebSocket, or an HTTP/2 POST; the version is in the
// path).
const SessionPath = "/sessions/v1"

// Session request operations.
const (
	SessionOpen        = "open"        // Hello: open a session, or resume one (Resume, Key)
	SessionHeartbeat   = "heartbeat"   // keeps the session online (no reply unless ID is set)
	SessionSubscribe   = "subscribe"   // Paths: take (or renew) leases on them
	SessionRenew       = "renew"       // Inos: renew leases held
	SessionUnsubscribe = "unsubscribe" // Inos: drop leases
	SessionLock        = "lock"        // Lock: set or release a lock (Wait: block until granted)
	SessionGetLk       = "getlk"       // Lock: the first lock that would conflict
	SessionCancel      = "cancel"      // Cancel: give up the blocked lock request with that ID
	SessionClose       = "close"       // end the session: its leases and locks are released
	SessionStat        = "stat"        // Paths[0]: its entry (Entry), as GET /api/v1/stat answers it
	SessionCreate      = "create"      // Paths[0], Exclusive, Mode: an empty file (Entry), as POST /api/v1/touch
	SessionNull        = "null"        // nothing: an empty reply (what a round trip on the channel costs)
	// SessionBatch carries several requests (Batch: stat, create, null) in
	// one frame, answered in one frame (SessionMessage.Batch, a reply per
	// request, in order, each with its own ID and error). Each request is
	// authorized as its own would be, with the stream's identity.
	// Requests of a batch run as if one after the other: those that
	// touch distinct paths run concurrently (creates share a commit), a
	// request on a path an earlier one of the batch touches waits for it.
	SessionBatch = "batch"
)

// MaxSessionBatch bounds the requests of one batch.
const MaxSessionBatch = 1024

// SessionRequest is one message a client sends on its session stream.
// ID, when not 0, is echoed by the reply (SessionReply); requests
// without one get no reply unless they fail.
type SessionRequest struct {
	ID     uint64        `json:"id,omitempty"`
	S      uint32        `json:"s,omitempty"` // the session of the stream it is for (0: the first)
	Op     string        `json:"op"`
	Hello  *SessionHello `json:"hello,omitempty"`
	Paths  []string      `json:"paths,omitempty"`
	Inos   []uint64      `json:"inos,omitempty"`
	Lock   *LockRequest  `json:"lock,omitempty"`
	Cancel uint64        `json:"cancel,omitempty"`
	Open   int           `json:"open_files,omitempty"` // heartbeat: files the client has open (fusex ls)
	// List (subscribe): each directory is also listed once its lease is
	// granted, when it holds at most MaxLeaseListing entries: the client
	// then knows every name (and every absent one) while the lease holds.
	List bool `json:"list,omitempty"`
	// Exclusive and Mode (create): fail if the file exists; the new
	// file's permission bits (0: 0644).
	Exclusive bool   `json:"exclusive,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	// Batch (batch): the requests, each with its own ID.
	Batch []SessionRequest `json:"batch,omitempty"`
}

// MaxLeaseListing bounds the directories a subscribe lists (by the
// entries its subtree counts): a larger one is leased without a listing.
const MaxLeaseListing = 4096

// SessionHello opens a session. Resume and Key name a session the client
// held: in the same incarnation (Term) it is resumed with its locks (its
// leases are gone: the client re-subscribes what it caches); in another
// one the client reclaims its Locks within the grace window that follows
// a takeover (NFSv4's and CephFS's reclaim).
type SessionHello struct {
	Host    string `json:"host,omitempty"`
	Version string `json:"version,omitempty"` // the client's version
	Resume  string `json:"resume,omitempty"`
	Key     string `json:"key,omitempty"`
	Term    uint64 `json:"term,omitempty"`
	Locks   []Lock `json:"locks,omitempty"` // to reclaim
}

// SessionInfo answers an open: the session, its secret to resume it with,
// the incarnation, and the timing the client must keep.
type SessionInfo struct {
	ID        string        `json:"id"`
	Key       string        `json:"key"`
	Term      uint64        `json:"term"`
	Resumed   bool          `json:"resumed,omitempty"` // the same session, locks kept
	Heartbeat time.Duration `json:"heartbeat"`
	Lease     time.Duration `json:"lease"`
	// Reclaimed are the locks of Hello.Locks the session holds again;
	// Lost those it could not (the grace window was over, or another
	// session holds them).
	Reclaimed []Lock `json:"reclaimed,omitempty"`
	Lost      []Lock `json:"lost,omitempty"`
	// Batch: the stream takes SessionBatch, SessionCreate and SessionNull.
	Batch bool `json:"batch,omitempty"`
}

// Lease is a subscription to the changes of one directory (its entries,
// their attributes) or file (its attributes and data), until Expires.
type Lease struct {
	Path    string    `json:"path,omitempty"`
	Ino     uint64    `json:"ino,omitempty"`
	Expires time.Time `json:"expires,omitempty"`
	Error   string    `json:"error,omitempty"` // why it was not granted
	Kind    kerr.Kind `json:"kind,omitempty"`
	// Listed: Entries are the directory's entries, read after the lease
	// was granted (so any later change comes as an invalidation).
	Listed  bool    `json:"listed,omitempty"`
	Entries []Entry `json:"entries,omitempty"`
}

// Lock kinds: POSIX record locks (fcntl) and BSD flock; they do not
// conflict with each other, as on Linux.
const (
	LockPOSIX = "posix"
	LockFlock = "flock"
)

// Lock types.
const (
	LockRead   = "read"   // F_RDLCK, LOCK_SH
	LockWrite  = "write"  // F_WRLCK, LOCK_EX
	LockUnlock = "unlock" // F_UNLCK, LOCK_UN
)

// LockRequest sets, releases or tests a lock on the file at Path. Owner
// is the lock owner within the session (the process of a POSIX lock, the
// open file of a flock). Len 0 is to the end of the file, whatever its
// size (flock covers the whole file).
type LockRequest struct {
	Path  string `json:"path"`
	Kind  string `json:"kind,omitempty"` // posix (default) or flock
	Type  string `json:"type"`
	Owner uint64 `json:"owner"`
	Start uint64 `json:"start,omitempty"`
	Len   uint64 `json:"len,omitempty"`
	Wait  bool   `json:"wait,omitempty"` // F_SETLKW, LOCK_EX without LOCK_NB
	Pid   uint32 `json:"pid,omitempty"`  // reported by F_GETLK to others
}

// Lock is a lock held (or, from GETLK, one in the way).
type Lock struct {
	Ino     uint64 `json:"ino"`
	Path    string `json:"path,omitempty"`
	Kind    string `json:"kind"`
	Type    string `json:"type"`
	Start   uint64 `json:"start"`
	Len     uint64 `json:"len,omitempty"` // 0: to the end of the file
	Owner   uint64 `json:"owner"`
	Pid     uint32 `json:"pid,omitempty"`
	Session string `json:"session,omitempty"` // the holder's session (to the admin)
}

// Session message kinds (server to client).
const (
	SessionReply = "reply" // the answer to the request ID
	SessionEvent = "event" // an invalidation (Event)
	SessionFull  = "full"  // drop everything cached: events were lost
	SessionEvict = "evict" // the session was evicted or closed by the service; Error says why
)

// SessionMessage is one message the service sends on a session stream.
type SessionMessage struct {
	Kind  string     `json:"kind"`
	S     uint32     `json:"s,omitempty"`
	ID    uint64     `json:"id,omitempty"`  // reply: the request's ID
	Seq   uint64     `json:"seq,omitempty"` // event, full, evict: the session's sequence number
	Term  uint64     `json:"term,omitempty"`
	Error *ErrorBody `json:"error,omitempty"`

	Session *SessionInfo  `json:"session,omitempty"` // open
	Leases  []Lease       `json:"leases,omitempty"`  // subscribe, renew
	Lock    *Lock         `json:"lock,omitempty"`    // getlk: the conflicting lock (nil: none)
	Entry   *Entry        `json:"entry,omitempty"`   // stat
	Event   *Invalidation `json:"event,omitempty"`
	// Held answers a lock request: the locks its owner holds on the file
	// now (what a client reclaims after a takeover).
	Held []Lock `json:"held,omitempty"`
	// Batch answers a batch: one reply per request, in its order.
	Batch []SessionMessage `json:"batch,omitempty"`
}

// Invalidation is a change pushed to the sessions holding a lease on the
// entry or on its directory: the change event with what changed of the
// entry's attributes (for files that became visible or changed: size,
// mtime, data version).
type Invalidation struct {
	Event
	// Lease is the inode whose lease brought the event (the entry's own,
	// its directory's, or a rename's source directory).
	Lease uint64 `json:"lease"`
}

// SessionConfig is the timing of sessions (`kaon fusex conf`): the
// heartbeat clients keep; a session whose heartbeat is older than 1.5
// heartbeats is volatile, older than Offline offline, older than Evict
// evicted (its locks released); leases last Lease unless renewed;
// MaxAudience is the broadcast suppression threshold (a directory with
// more subscribers gets no size/mtime updates pushed; 0: no
// suppression); Grace is how long a new incarnation waits for the
// sessions of the previous one to reclaim their locks.
type SessionConfig struct {
	Heartbeat   time.Duration `json:"heartbeat"`
	Lease       time.Duration `json:"lease"`
	Offline     time.Duration `json:"offline"`
	Evict       time.Duration `json:"evict"`
	Grace       time.Duration `json:"grace"`
	MaxAudience int           `json:"max_audience"`
}

// Session states, as EOS names them.
const (
	SessionOnline   = "online"
	SessionVolatile = "volatile"
	SessionOffline  = "offline"
)

// SessionStatus is a row of `kaon fusex ls`.
type SessionStatus struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	User      string    `json:"user"`
	Version   string    `json:"version"`
	State     string    `json:"state"`
	Connected bool      `json:"connected"` // its stream is open
	Since     time.Time `json:"since"`
	Heartbeat time.Time `json:"heartbeat"` // the last one
	Leases    int       `json:"leases"`
	OpenFiles int       `json:"open_files"`
	Locks     int       `json:"locks"`
	Sent      uint64    `json:"sent"`     // invalidations pushed
	Dropped   uint64    `json:"dropped"`  // full invalidations sent instead of events lost
	Requests  uint64    `json:"requests"` // requests served
	// Rates over the last minute, per second.
	EventRate   float64 `json:"event_rate"`
	RequestRate float64 `json:"request_rate"`
}

// SessionCap is a lease as `kaon fusex caps` shows it.
type SessionCap struct {
	Session string    `json:"session"`
	Ino     uint64    `json:"ino"`
	Path    string    `json:"path"`
	Expires time.Time `json:"expires"`
}

// FusexList is the answer of `fusex ls`.
type FusexList struct {
	Config   SessionConfig   `json:"config"`
	Term     uint64          `json:"term"`
	Grace    time.Time       `json:"grace,omitempty"` // locks wait for reclaims until then
	Sessions []SessionStatus `json:"sessions"`
}

// FusexSessionRequest names a session (fusex evict, dropcaps, caps).
type FusexSessionRequest struct {
	Session string `json:"session"`
}

// FromArgs reads the request from the route's arguments.
func (r *FusexSessionRequest) FromArgs(a Args) error {
	r.Session = a["session"]
	return nil
}

// FusexPathRequest names a file (fusex droplocks).
type FusexPathRequest struct {
	Path string `json:"path"`
}

// FromArgs reads the request from the route's arguments.
func (r *FusexPathRequest) FromArgs(a Args) error {
	r.Path = a["path"]
	if r.Path == "" {
		return kerr.New(kerr.Invalid, "fusex", "", "a path is required")
	}
	return nil
}

// FusexConfRequest changes session settings: KEY=VALUE pairs with the
// keys heartbeat, lease, offline, evict, grace (durations) and
// broadcast.max-audience (a count). Without any it only reads them.
type FusexConfRequest struct {
	Set []string `json:"set,omitempty"`
}

// FromArgs reads the request from the route's arguments.
func (r *FusexConfRequest) FromArgs(a Args) (err error) {
	r.Set, err = a.Strings("fusex conf", "set")
	return err
}

// FusexDropped counts what an admin command released.
type FusexDropped struct {
	Leases int `json:"leases,omitempty"`
	Locks  int `json:"locks,omitempty"`
}

// MessageStream reads the messages of a WebSocket session channel as one
// stream, so one json.Decoder (and its buffer) serves the whole
// connection: every value is an object, whole within its message, so a
// Decode never waits for a message beyond the value's own. Next returns
// the next message's reader (gorilla/websocket's NextReader).
type MessageStream struct {
	Next func() (io.Reader, error)
	r    io.Reader
}

func (m *MessageStream) Read(p []byte) (int, error) {
	for {
		if m.r == nil {
			r, err := m.Next()
			if err != nil {
				return 0, err
			}
			m.r = r
		}
		n, err := m.r.Read(p)
		if errors.Is(err, io.EOF) {
			m.r = nil
			err = nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
}
