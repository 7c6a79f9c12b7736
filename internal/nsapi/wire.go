package nsapi

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// The admin API (/api/v1/ROUTE on the namespace endpoint): GET with query
// parameters for what reads, POST with a JSON object for what changes;
// the answer is a JSON value (the route's response type), or on failure
// an ErrorBody with the status kerr.HTTPStatus maps its kind to.

// ErrorBody is the JSON error every admin API call returns on failure.
type ErrorBody struct {
	Kind    kerr.Kind `json:"kind"`
	Message string    `json:"message"` // names the path or object and the reason
}

// ActiveHeader names the active namespace server on a standby's redirect
// (307, same method, path and query), so a client that follows redirects
// itself can tell it from a storage server's and send its credentials
// there again.
const ActiveHeader = "Kaon-Active"

// CallerPidHeader names, on a request of a local mount acting for one of
// its callers on a socket owned by the caller's uid, the calling
// process: the server takes that process's groups (auth.ProcessGroups)
// when the process's file system uid is the socket's owner.
const CallerPidHeader = "Kaon-Caller-Pid"

// Args is an admin request as the server reads it: the query's
// parameters, then the fields of a JSON body, each value a string as
// sent, anything else (booleans, numbers, lists) as its JSON text. Each
// route's request type reads it (FromArgs), so a request may come as
// query parameters or JSON, with numbers and booleans quoted or not.
type Args map[string]string

// ArgsOf adds the fields of a JSON object to a (nil: a new Args).
func ArgsOf(a Args, body []byte) (Args, error) {
	if a == nil {
		a = Args{}
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return a, err
	}
	for k, v := range m {
		switch v := v.(type) {
		case string:
			a[k] = v
		default:
			b, _ := json.Marshal(v)
			a[k] = string(b)
		}
	}
	return a, nil
}

// Bool reads a boolean argument: what strconv.ParseBool takes as true, or
// false.
func (a Args) Bool(k string) bool { b, _ := strconv.ParseBool(a[k]); return b }

// Strings reads a list of strings (JSON), absent: nil.
func (a Args) Strings(op, k string) ([]string, error) {
	if a[k] == "" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(a[k]), &out); err != nil {
		return nil, kerr.New(kerr.Invalid, op, k, "want a list of strings")
	}
	return out, nil
}

// Mode is permission bits, written in octal ("755").
type Mode uint32

// MarshalText writes m in octal.
func (m Mode) MarshalText() ([]byte, error) { return []byte(strconv.FormatUint(uint64(m), 8)), nil }

// ParseMode reads permission bits in octal for operation op on path.
func ParseMode(op, path, s string) (Mode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, kerr.New(kerr.Invalid, op, path, fmt.Sprintf("bad mode %q (octal)", s))
	}
	return Mode(m), nil
}

// Duration is a time.Duration written as text ("24h0m0s").
type Duration time.Duration

// Duration is d as a time.Duration.
func (d Duration) Duration() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads what time.ParseDuration reads.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}
