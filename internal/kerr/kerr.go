// Package kerr defines the error vocabulary shared by every Kaon layer.
//
// Layers return *Error with a Kind; each protocol front end (HTTP, XRootD,
// FUSE) maps the Kind to its own code in one place, so a user always sees
// the path, the reason and the right protocol status.
package kerr

import (
	"errors"
	"fmt"
	"syscall"
)

// Kind classifies an error independently of any protocol.
type Kind int

const (
	Internal    Kind = iota // unexpected failure; logged, reported as I/O error
	NotFound                // path or object does not exist
	Exists                  // target already exists
	NotDir                  // a path component is not a container
	IsDir                   // operation needs a file, got a container
	NotEmpty                // container not empty
	Permission              // caller not authorized
	Invalid                 // malformed argument (bad path, bad layout, ...)
	NameTooLong             // name > 255 bytes or path > 4096 bytes
	NoSpace                 // no usable filesystem / capacity
	Quota                   // quota exceeded
	Busy                    // resource busy, retry later
	IO                      // data I/O failed (disk, checksum mismatch)
	Unsupported             // operation not implemented
	ReadOnly                // target is read-only
	Expired                 // capability or token expired
	Unavailable             // a needed service or enough of the data is not reachable now
)

// Unauthenticated: no acceptable credential (a bearer token missing,
// forged or unusable); HTTP 401, where Permission is 403.
const Unauthenticated = Unavailable + 1

// Down: the namespace cannot be served now (its replicated store lost its
// quorum, no active namespace server to send clients to); HTTP 503,
// kXR_ServerError; clients retry later.
const Down = Unauthenticated + 1

// Aborted: an operation in flight was ended by the system, not refused
// for what it asked (an upload whose namespace server failed over while
// it streamed: the new one aborted it), and done again from the start it
// may succeed; HTTP 503 with Retry-After, kXR_Cancelled, EIO.
const Aborted = Down + 1

// Locked: a lock another owner holds is in the way (F_SETLK, flock
// with LOCK_NB); EAGAIN, HTTP 423.
const Locked = Aborted + 1

// Deadlock: waiting for a lock would wait forever (its holder waits for
// one the caller holds); EDEADLK, HTTP 409.
const Deadlock = Locked + 1

// Loop: a path crosses more symbolic links than may be followed (40, a
// loop most likely); ELOOP, HTTP 508 (Loop Detected).
const Loop = Deadlock + 1

var kindNames = [...]string{"internal error", "not found", "exists", "not a directory",
	"is a directory", "directory not empty", "permission denied", "invalid argument",
	"name too long", "no space", "quota exceeded", "busy", "I/O error", "unsupported",
	"read-only", "expired", "unavailable", "not authenticated", "namespace unavailable", "aborted",
	"locked by another owner", "deadlock", "too many levels of symbolic links"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is the error type every Kaon layer returns to its callers.
type Error struct {
	Kind Kind
	Op   string // operation, e.g. "mkdir"
	Path string // path or object the error is about
	Msg  string // human reason; defaults to Kind.String()
	Err  error  // optional cause
}

func (e *Error) Error() string {
	msg := e.Msg
	if msg == "" {
		msg = e.Kind.String()
	}
	s := msg
	if e.Path != "" {
		s = e.Path + ": " + msg
	}
	if e.Op != "" {
		s = e.Op + " " + s
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// New builds an *Error.
func New(k Kind, op, path, msg string) *Error { return &Error{Kind: k, Op: op, Path: path, Msg: msg} }

// Wrap builds an *Error around a cause.
func Wrap(k Kind, op, path string, err error) *Error {
	return &Error{Kind: k, Op: op, Path: path, Err: err}
}

// WithOp names the operation on err when it is a *Error that has none yet
// (errors from shared helpers such as path validation), and returns err.
func WithOp(err error, op string) error {
	var e *Error
	if errors.As(err, &e) && e.Op == "" {
		e.Op = op
	}
	return err
}

// KindOf returns the Kind of err (Internal when err is not a *Error, after
// mapping common syscall errnos).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOENT:
			return NotFound
		case syscall.EEXIST:
			return Exists
		case syscall.ENOTDIR:
			return NotDir
		case syscall.EISDIR:
			return IsDir
		case syscall.ENOTEMPTY:
			return NotEmpty
		case syscall.EACCES, syscall.EPERM:
			return Permission
		case syscall.EINVAL:
			return Invalid
		case syscall.ENAMETOOLONG:
			return NameTooLong
		case syscall.ENOSPC:
			return NoSpace
		case syscall.EDQUOT:
			return Quota
		case syscall.EBUSY, syscall.EAGAIN:
			return Busy
		case syscall.EDEADLK:
			return Deadlock
		case syscall.ELOOP:
			return Loop
		case syscall.EROFS:
			return ReadOnly
		case syscall.EIO:
			return IO
		case syscall.ETIMEDOUT, syscall.ENOTCONN, syscall.ESHUTDOWN, syscall.EHOSTUNREACH:
			// a storage system that does not answer (a Ceph operation
			// past its timeout, a FUSE daemon gone)
			return Unavailable
		}
	}
	return Internal
}

// Is reports whether err has kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }

// Errno maps a Kind to the POSIX errno a FUSE client should see.
func Errno(k Kind) syscall.Errno {
	switch k {
	case NotFound:
		return syscall.ENOENT
	case Exists:
		return syscall.EEXIST
	case NotDir:
		return syscall.ENOTDIR
	case IsDir:
		return syscall.EISDIR
	case NotEmpty:
		return syscall.ENOTEMPTY
	case Permission:
		return syscall.EACCES
	case Invalid:
		return syscall.EINVAL
	case NameTooLong:
		return syscall.ENAMETOOLONG
	case NoSpace:
		return syscall.ENOSPC
	case Quota:
		return syscall.EDQUOT
	case Busy:
		return syscall.EBUSY
	case Unsupported:
		return syscall.ENOTSUP
	case ReadOnly:
		return syscall.EROFS
	case Expired, Unauthenticated:
		return syscall.EACCES
	case Unavailable, Down, Aborted:
		return syscall.EIO
	case Locked:
		return syscall.EAGAIN
	case Deadlock:
		return syscall.EDEADLK
	case Loop:
		return syscall.ELOOP
	}
	return syscall.EIO
}

// HTTPStatus maps a Kind to the HTTP status a client should see (the
// WebDAV front, the admin and data endpoints and the internal protocol
// all answer with it).
func HTTPStatus(k Kind) int {
	switch k {
	case NotFound:
		return 404
	case Exists, NotEmpty, NotDir:
		return 409 // Conflict
	case IsDir:
		return 405 // Method Not Allowed
	case Permission, Expired, ReadOnly:
		return 403
	case Unauthenticated:
		return 401
	case Invalid:
		return 400
	case NameTooLong:
		return 414 // URI Too Long
	case NoSpace, Quota:
		return 507 // Insufficient Storage
	case Busy, Unavailable, Down, Aborted:
		return 503
	case Unsupported:
		return 501
	case Locked:
		return 423 // Locked (WebDAV)
	case Deadlock:
		return 409
	case Loop:
		return 508 // Loop Detected (WebDAV)
	}
	return 500
}

// KindOfHTTP is the Kind a client tells from an HTTP status that came
// without Kaon's error body (a data endpoint's text, a proxy): the first
// Kind HTTPStatus maps to it, Internal for a status none maps to.
func KindOfHTTP(status int) Kind {
	for k := Kind(0); int(k) < len(kindNames); k++ {
		if HTTPStatus(k) == status {
			return k
		}
	}
	return Internal
}

// RetryAfter is the HTTP Retry-After (seconds) that goes with a Kind's
// status, 0 for none: every 503 asks the client to come back (the
// condition passes: an election, a member back, an upload sent again).
func RetryAfter(k Kind) int {
	if HTTPStatus(k) == 503 {
		return 1
	}
	return 0
}
