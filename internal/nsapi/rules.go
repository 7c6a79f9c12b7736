package nsapi

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Access rules (kaon access): whom the namespace service refuses, whom
// alone it admits, whom it stalls or sends elsewhere, and how many
// operations per second a user or a group may make. The service checks
// them on every request of every protocol; the admin role is exempt.

// Kinds of subject an access rule names.
const (
	SubjectUser         = "user"          // a uid (names are resolved when the rule is set)
	SubjectGroup        = "group"         // a gid: the primary group or any of the client's groups
	SubjectHost         = "host"          // the client's address, as its connection shows it
	SubjectTokenSubject = "token-subject" // a bearer token's subject
)

// SubjectKinds are the kinds of subject, as `access ls` lists them.
var SubjectKinds = []string{SubjectUser, SubjectGroup, SubjectHost, SubjectTokenSubject}

// Subject is who an access rule names.
type Subject struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

func (s Subject) String() string { return s.Kind + " " + s.Value }

// AccessRules are the instance's access rules. An empty Allows admits
// everyone not banned; a kind of subject with allow rules admits only
// those it names. A stall or redirect without a subject applies to
// every client.
type AccessRules struct {
	Bans      []Subject      `json:"bans,omitempty"`
	Allows    []Subject      `json:"allows,omitempty"`
	Stalls    []AccessStall  `json:"stalls,omitempty"`
	Redirects []AccessTarget `json:"redirects,omitempty"`
	Limits    []AccessLimit  `json:"limits,omitempty"`
}

// AccessStall answers the requests of Subject (nil: everyone) "come back
// in Seconds" (HTTP 503 with Retry-After, root:// kXR_wait).
type AccessStall struct {
	Subject *Subject `json:"subject,omitempty"`
	Seconds int      `json:"seconds"`
}

// AccessTarget sends the requests of Subject (nil: everyone) to another
// namespace server (HTTP 307, root:// kXR_redirect): host:port of its
// root:// listener, and its HTTP base URL.
type AccessTarget struct {
	Subject *Subject `json:"subject,omitempty"`
	XRootD  string   `json:"xrootd,omitempty"`
	HTTP    string   `json:"http,omitempty"`
}

// AccessLimit caps the namespace operations per second of a user, or of
// a group's members together (EOS access set limit).
type AccessLimit struct {
	Subject Subject `json:"subject"`
	Rate    float64 `json:"rate"`
}

// AccessRequest is POST access/ban|unban|allow|unallow|stall|redirect|limit:
// the rule's subject (empty Kind: everyone, for stall and redirect) and
// its argument (stall: seconds, 0 lifts it; redirect: the target; limit:
// operations per second, 0 lifts it).
type AccessRequest struct {
	Kind  string `json:"kind,omitempty"`
	Value string `json:"value,omitempty"`
	Arg   string `json:"arg,omitempty"`
}

// FromArgs reads r from a.
func (r *AccessRequest) FromArgs(a Args) error {
	r.Kind, r.Value, r.Arg = a["kind"], a["value"], a["arg"]
	return nil
}

// SubjectOf is r's subject, checked (nil for none: Kind and Value empty).
func (r AccessRequest) SubjectOf(op string) (*Subject, error) {
	if r.Kind == "" && r.Value == "" {
		return nil, nil
	}
	for _, k := range SubjectKinds {
		if k == r.Kind {
			if r.Value == "" {
				return nil, kerr.New(kerr.Invalid, op, r.Kind, "missing value")
			}
			return &Subject{Kind: r.Kind, Value: r.Value}, nil
		}
	}
	return nil, kerr.New(kerr.Invalid, op, r.Kind, fmt.Sprintf("unknown subject kind (want one of %v)", SubjectKinds))
}

// Client is a row of `kaon who`: a client the namespace service served
// lately, by protocol, authentication method, identity and host.
type Client struct {
	Protocol string    `json:"protocol"`
	Method   string    `json:"method"`
	Name     string    `json:"name"`
	UID      uint32    `json:"uid"`
	Host     string    `json:"host"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	Requests int64     `json:"requests"`
}

// ParseRate reads a rate (operations per second) argument.
func ParseRate(op, s string) (float64, error) {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || r < 0 {
		return 0, kerr.New(kerr.Invalid, op, s, "want a rate: operations per second, 0 or more")
	}
	return r, nil
}

// Redirect is the answer to a request an access rule sends elsewhere:
// the front end redirects its client to the target of its protocol
// (HTTP 307 to HTTP + the request's path, root:// kXR_redirect to
// XRootD), or refuses it naming the target when there is none.
type Redirect struct {
	XRootD string // host:port
	HTTP   string // base URL
}

func (r *Redirect) Error() string {
	return fmt.Sprintf("redirected by the operator to %s", r.target())
}

// Unwrap classifies r for clients that cannot be redirected: the
// service is unavailable here.
func (r *Redirect) Unwrap() error {
	return &kerr.Error{Kind: kerr.Unavailable, Msg: "the operator sends clients elsewhere"}
}

func (r *Redirect) target() string {
	switch {
	case r.HTTP != "" && r.XRootD != "":
		return r.HTTP + " (root://" + r.XRootD + ")"
	case r.HTTP != "":
		return r.HTTP
	}
	return "root://" + r.XRootD
}

// ParseTarget reads the target of `access redirect`: root://HOST:PORT
// and/or http(s)://HOST:PORT, comma-separated.
func ParseTarget(op, s string) (AccessTarget, error) {
	var t AccessTarget
	for _, u := range strings.Split(s, ",") {
		u = strings.TrimRight(strings.TrimSpace(u), "/")
		switch {
		case strings.HasPrefix(u, "root://"):
			hp := strings.TrimPrefix(u, "root://")
			if _, _, err := net.SplitHostPort(hp); err != nil {
				return t, kerr.New(kerr.Invalid, op, u, "want root://HOST:PORT")
			}
			t.XRootD = hp
		case strings.HasPrefix(u, "http://"), strings.HasPrefix(u, "https://"):
			if _, err := url.Parse(u); err != nil {
				return t, kerr.New(kerr.Invalid, op, u, "bad URL")
			}
			t.HTTP = u
		default:
			return t, kerr.New(kerr.Invalid, op, u, "want root://HOST:PORT and/or http(s)://HOST:PORT, comma-separated")
		}
	}
	return t, nil
}

// DebugRequest is POST debug: the log level (debug, info, warn, error)
// of a role (mgm, fst; "": both).
type DebugRequest struct {
	Level string `json:"level"`
	Role  string `json:"role,omitempty"`
}

// FromArgs reads r from a.
func (r *DebugRequest) FromArgs(a Args) error { r.Level, r.Role = a["level"], a["role"]; return nil }

// DebugLevels are the log levels in force: the namespace server's, and
// the one it sends the storage servers ("" if never set).
type DebugLevels struct {
	MGM string `json:"mgm"`
	FST string `json:"fst,omitempty"`
}

// SavedConfig is a row of `kaon config ls`: one saved version of a named
// configuration, when and by whom it was saved, and what it holds.
type SavedConfig struct {
	Name        string    `json:"name"`
	Version     uint64    `json:"version"`
	Saved       time.Time `json:"saved"`
	By          string    `json:"by"`
	Spaces      int       `json:"spaces"`
	Groups      int       `json:"groups"`
	Filesystems int       `json:"filesystems"`
	Rules       int       `json:"access_rules"`
	Quotas      int       `json:"quotas"`
}

// ConfigRef names a saved configuration (POST config/save, config/load):
// its version (0: the latest, for load).
type ConfigRef struct {
	Name    string `json:"name"`
	Version uint64 `json:"version,omitempty,string"`
}

// FromArgs reads r from a.
func (r *ConfigRef) FromArgs(a Args) error {
	r.Name = a["name"]
	if a["version"] == "" {
		return nil
	}
	v, err := strconv.ParseUint(a["version"], 10, 64)
	if err != nil {
		return kerr.New(kerr.Invalid, "config", a["version"], "want a version number (kaon config ls)")
	}
	r.Version = v
	return nil
}

// ConfigLoaded is the answer of config/load: the version applied and
// what of it could not be (a filesystem no longer registered, a quota
// node gone).
type ConfigLoaded struct {
	SavedConfig
	Skipped []string `json:"skipped,omitempty"`
}

// IOStatRequest is GET io/stat: the I/O of one user (uid or name) and
// one application, when given.
type IOStatRequest struct {
	User string `json:"user,omitempty"`
	App  string `json:"app,omitempty"`
}

// FromArgs reads r from a.
func (r *IOStatRequest) FromArgs(a Args) error { r.User, r.App = a["user"], a["app"]; return nil }

// IORow is a row of `kaon io stat`: what the storage servers served one
// user (uid, gid) through one application, over the last minute, 5
// minutes and hour.
type IORow struct {
	UID     uint32     `json:"uid"`
	GID     uint32     `json:"gid"`
	App     string     `json:"app"`
	Windows []IOWindow `json:"windows"`
}

// IOWindow is the I/O of a window of Seconds: bytes read and written,
// files read (closed) and uploads committed.
type IOWindow struct {
	Seconds    int   `json:"seconds"`
	ReadBytes  int64 `json:"read_bytes"`
	WriteBytes int64 `json:"write_bytes"`
	Reads      int64 `json:"reads"`
	Writes     int64 `json:"writes"`
}
