package nsapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// request is what every route's request type is.
type request interface{ FromArgs(Args) error }

// TestRequestsReadTheirJSON: what a client sends of every request type,
// as a JSON body or as query parameters (every value a string), is read
// back by the server as the same request.
func TestRequestsReadTheirJSON(t *testing.T) {
	for _, want := range []request{
		&PathRequest{Path: "/a b"},
		&MkdirRequest{Path: "/d", Mode: 0o700, Parents: true},
		&ChmodRequest{Path: "/f", Mode: 0o640},
		&ChownRequest{Path: "/f", UID: 1001, GID: 4294967295},
		&TouchRequest{Path: "/f", Exclusive: true},
		&TouchRequest{Path: "/f", Mode: 0o600},
		&TruncateRequest{Path: "/f", Size: 1 << 40},
		&UtimesRequest{Path: "/f", MTime: 1700000000123456789},
		&UtimesRequest{Path: "/f", Now: true},
		&RemoveRequest{Path: "/d", Recursive: true},
		&RenameRequest{From: "/a", To: "/b", Overwrite: true},
		&AttrRequest{Path: "/d", Name: AttrACL, Value: "u:1001:rwx"},
		&NewFilesystem{Node: "n:1", Path: "rados://p", Group: "g.0", Space: "g", IO: "direct", ObjectSize: "16M"},
		&FsConfigRequest{ID: 7, Key: "configstatus", Value: "drain"},
		&FsStatusRequest{ID: 7},
		&FsReinitRequest{ID: 7},
		&NameRequest{Name: "ssd"},
		&ConfigRequest{Name: "ssd.0", Key: "balancer", Value: "on"},
		&QuotaKeyRequest{Path: "/q", Kind: QuotaGroup, ID: 5},
		&QuotaSetRequest{QuotaKeyRequest: QuotaKeyRequest{Path: "/q", Kind: QuotaUser, ID: 5}, Bytes: 1 << 50, Files: 3},
		&QuotaSetRequest{QuotaKeyRequest: QuotaKeyRequest{Path: "/q", Kind: QuotaProject}},
		&QuotaListRequest{Path: "/q"},
		&RecycleRestoreRequest{Key: "k1", ForceRename: true},
		&RecyclePurgeRequest{Key: "k1", OlderThan: Duration(72 * time.Hour)},
		&RestoreVersionRequest{Path: "/f", Version: "17.2a"},
		&ConvertRequest{Path: "/f", Space: "ssd", Layout: "ec:4+2"},
		&TokenRequest{User: "alice", Paths: []string{"/p"}, Scopes: []string{"storage.read"}, Audience: []string{"https://x"}, TTL: Duration(time.Hour)},
		&FsckReportRequest{Class: "orphans_n", FsID: 3},
		&FsckRunRequest{FsID: 3, Scrub: true},
		&FsckRepairRequest{Class: "all", FsID: 3},
		&None{},
	} {
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		body, err := ArgsOf(nil, b)
		if err != nil {
			t.Fatalf("%T: %s: %v", want, b, err)
		}
		query := Args{} // as a GET sends it: every value a string
		for k, v := range body {
			query[k] = strings.Trim(v, `"`)
		}
		for form, a := range map[string]Args{"body": body, "query": query} {
			got := reflect.New(reflect.TypeOf(want).Elem()).Interface().(request)
			if err := got.FromArgs(a); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%T from %s %v (sent %s): %+v, %v", want, form, a, b, got, err)
			}
		}
	}
}

// TestRequestsRefuseWithTheirMessage: malformed arguments are refused
// with the route's message, as an invalid argument.
func TestRequestsRefuseWithTheirMessage(t *testing.T) {
	for _, c := range []struct {
		r    request
		args Args
		want string
	}{
		{&MkdirRequest{}, Args{"path": "/d", "mode": "9"}, `mkdir /d: bad mode "9" (octal)`},
		{&ChmodRequest{}, Args{"path": "/f"}, "chmod /f: missing mode"},
		{&ChmodRequest{}, Args{"path": "/f", "mode": "17777"}, `chmod /f: bad mode "17777" (octal)`},
		{&ChownRequest{}, Args{"path": "/f", "uid": "1"}, "chown /f: uid and gid must be numbers"},
		{&TruncateRequest{}, Args{"path": "/f", "size": "-1"}, "truncate /f: size must be a number of bytes"},
		{&TouchRequest{}, Args{"path": "/f", "mode": "8"}, `touch /f: bad mode "8" (octal)`},
		{&NewFilesystem{}, Args{"object-size": "16X"}, `fs add 16X: bad size "16X" (e.g. 4M, 16M, 64M)`},
		{&FsConfigRequest{}, Args{"id": "x"}, "fs config x: bad filesystem id"},
		{&FsStatusRequest{}, Args{}, "fs status bad filesystem id"},
		{&FsReinitRequest{}, Args{"id": "-1"}, "fs reinit -1: bad filesystem id"},
		{&QuotaKeyRequest{}, Args{"path": "/q", "kind": "user"}, "quota rm /q: bad uid/gid"},
		{&QuotaKeyRequest{}, Args{"path": "/q", "kind": "other", "id": "1"}, "quota rm /q: quota kind must be user, group or project"},
		{&QuotaSetRequest{}, Args{"path": "/q", "kind": "project", "bytes": "1"}, "quota set /q: bytes and files must be numbers"},
		{&RecyclePurgeRequest{}, Args{"older_than": "3 days"}, "recycle purge 3 days: bad duration (e.g. 72h)"},
		{&TokenRequest{}, Args{"ttl": "forever"}, "token issue forever: bad lifetime"},
		{&TokenRequest{}, Args{"ttl": "1h", "paths": "/p"}, "token issue paths: want a list of strings"},
		{&FsckReportRequest{}, Args{"fs": "x"}, "fsck report x: bad filesystem id"},
		{&FsckRunRequest{}, Args{"fs": "1.5"}, "fsck run 1.5: bad filesystem id"},
		{&FsckRepairRequest{}, Args{}, "fsck repair name the class to repair (or all)"},
	} {
		err := c.r.FromArgs(c.args)
		if !kerr.Is(err, kerr.Invalid) || err.Error() != c.want {
			t.Errorf("%T from %v: %v, want %q", c.r, c.args, err, c.want)
		}
	}
}

// TestRequestDefaults: what a route takes when an argument is absent.
func TestRequestDefaults(t *testing.T) {
	var m MkdirRequest
	var q QuotaListRequest
	var p RecyclePurgeRequest
	var f FsckRunRequest
	for _, r := range []request{&m, &q, &p, &f} {
		if err := r.FromArgs(Args{}); err != nil {
			t.Fatalf("%T: %v", r, err)
		}
	}
	if m.Mode != 0o755 || q.Path != "/" || p.OlderThan != 0 || f.FsID != 0 {
		t.Fatalf("defaults: mkdir mode %o, quota ls path %q, purge older than %v, fsck run fs %d", m.Mode, q.Path, p.OlderThan, f.FsID)
	}
}
