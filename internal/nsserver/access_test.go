package nsserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestAccessRules: bans by user, group, host and token subject refuse
// the next request with Permission naming the ban, unban lifts them, an
// allow list admits only those it names, a stall is Busy, a redirect is
// an nsapi.Redirect; the admin is exempt; the rules survive a restart
// over the same engine (another server of the instance).
func TestAccessRules(t *testing.T) {
	ctx := context.Background()
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	eng := memkv.New()
	s, err := New(Config{Engine: eng, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	alice := auth.Principal{UID: 1001, GID: 100, Groups: []uint32{200}, Name: "alice", Method: "token", Host: "10.0.0.1", Subject: "sub-a"}
	bob := auth.Principal{UID: 1002, GID: 300, Name: "bob", Method: "unix", Host: "10.0.0.2"}
	admin := auth.Principal{Name: "root", Method: "unix", Host: "10.0.0.1"}
	set := func(verb, kind, value, arg string) {
		t.Helper()
		if err := s.SetAccess(ctx, root, verb, nsapi.AccessRequest{Kind: kind, Value: value, Arg: arg}); err != nil {
			t.Fatalf("access %s %s %s %s: %v", verb, kind, value, arg, err)
		}
	}
	for _, b := range []nsapi.Subject{{Kind: "user", Value: "1001"}, {Kind: "group", Value: "200"}, {Kind: "host", Value: "10.0.0.1"}, {Kind: "token-subject", Value: "sub-a"}} {
		set("ban", b.Kind, b.Value, "")
		err := s.Admit(ctx, alice)
		if !kerr.Is(err, kerr.Permission) || !strings.Contains(err.Error(), b.String()+" is banned") {
			t.Errorf("alice after ban %s: %v (want permission denied naming the ban)", b, err)
		}
		if err := s.Admit(ctx, bob); err != nil {
			t.Errorf("bob after ban %s: %v", b, err)
		}
		if err := s.Admit(ctx, admin); err != nil {
			t.Errorf("the admin after ban %s: %v", b, err)
		}
		set("unban", b.Kind, b.Value, "")
		if err := s.Admit(ctx, alice); err != nil {
			t.Errorf("alice after unban %s: %v", b, err)
		}
	}
	if err := s.SetAccess(ctx, root, "unban", nsapi.AccessRequest{Kind: "user", Value: "1001"}); !kerr.Is(err, kerr.NotFound) {
		t.Errorf("unban of no ban: %v", err)
	}
	if err := s.SetAccess(ctx, alice, "ban", nsapi.AccessRequest{Kind: "user", Value: "1002"}); !kerr.Is(err, kerr.Permission) {
		t.Errorf("ban by a user: %v", err)
	}

	set("allow", "host", "10.0.0.2", "")
	if err := s.Admit(ctx, alice); !kerr.Is(err, kerr.Permission) || !strings.Contains(err.Error(), "allow list") {
		t.Errorf("alice off the host allow list: %v", err)
	}
	if err := s.Admit(ctx, bob); err != nil {
		t.Errorf("bob on the allow list: %v", err)
	}
	set("unallow", "host", "10.0.0.2", "")

	set("stall", "user", "1002", "30")
	if err := s.Admit(ctx, bob); !kerr.Is(err, kerr.Busy) || !strings.Contains(err.Error(), "30 s") {
		t.Errorf("bob stalled: %v", err)
	}
	set("stall", "user", "1002", "0")
	set("redirect", "", "", "root://other:1094,http://other:8000")
	var rd *nsapi.Redirect
	if err := s.Admit(ctx, bob); !errors.As(err, &rd) || rd.XRootD != "other:1094" || rd.HTTP != "http://other:8000" {
		t.Errorf("bob redirected: %v", err)
	}
	set("redirect", "", "", "")
	set("ban", "user", "1001", "")

	// Another server over the same engine applies the same rules.
	s2, err := New(Config{Engine: eng, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Admit(ctx, alice); !kerr.Is(err, kerr.Permission) {
		t.Errorf("alice on a server started after the ban: %v", err)
	}
	if err := s2.Admit(ctx, bob); err != nil {
		t.Errorf("bob on a server started after the ban: %v", err)
	}
	if r, _ := s2.AccessRules(ctx, root); len(r.Bans) != 1 || len(r.Redirects) != 0 || len(r.Stalls) != 0 {
		t.Errorf("rules after restart: %+v", r)
	}
}

// TestAccessLimit: a user's rate limit admits RATE requests per second
// and a tenth of a second's worth more at most, whatever the number of
// callers, refusing the rest with Busy (HTTP 503 + Retry-After,
// kXR_wait); a group's limit is its members' together; others are not
// limited.
func TestAccessLimit(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	s, err := New(Config{Engine: memkv.New(), Key: key, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetAccess(ctx, root, "limit", nsapi.AccessRequest{Kind: "user", Value: "1001", Arg: "100"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAccess(ctx, root, "limit", nsapi.AccessRequest{Kind: "group", Value: "500", Arg: "20"}); err != nil {
		t.Fatal(err)
	}
	alice := auth.Principal{UID: 1001, GID: 100, Name: "alice"}
	g1, g2 := auth.Principal{UID: 2001, GID: 500}, auth.Principal{UID: 2002, GID: 500}
	bob := auth.Principal{UID: 1002, GID: 100}
	admitted := map[uint32]int{}
	// 10 s in 1 ms steps, 8 requests of each caller per step.
	for step := 0; step < 10000; step++ {
		now = now.Add(time.Millisecond)
		for i := 0; i < 8; i++ {
			for _, p := range []auth.Principal{alice, g1, g2, bob} {
				err := s.Admit(ctx, p)
				switch {
				case err == nil:
					admitted[p.UID]++
				case !kerr.Is(err, kerr.Busy) || !strings.Contains(err.Error(), "rate limit"):
					t.Fatalf("refusal of %d: %v", p.UID, err)
				}
			}
		}
	}
	if n := admitted[1001]; n < 1000 || n > 1010 {
		t.Errorf("alice admitted %d requests in 10 s at 100/s", n)
	}
	if n := admitted[2001] + admitted[2002]; n < 200 || n > 202 {
		t.Errorf("group 500 admitted %d requests in 10 s at 20/s", n)
	}
	if n := admitted[1002]; n != 80000 {
		t.Errorf("bob (no limit) admitted %d of 80000", n)
	}
	if err := s.SetAccess(ctx, root, "limit", nsapi.AccessRequest{Kind: "host", Value: "10.0.0.1", Arg: "5"}); !kerr.Is(err, kerr.Invalid) {
		t.Errorf("limit on a host: %v", err)
	}
}

// BenchmarkAdmit: what a request pays for the access rules, without
// rules and with 10 bans and a rate limit it is not subject to.
func BenchmarkAdmit(b *testing.B) {
	ctx := auth.WithProtocol(context.Background(), "http")
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	p := auth.Principal{UID: 1001, GID: 100, Name: "alice", Method: "token", Host: "10.0.0.1", Subject: "sub-a"}
	for _, rules := range []int{0, 10} {
		s, err := New(Config{Engine: memkv.New(), Key: key})
		if err != nil {
			b.Fatal(err)
		}
		for i := range rules {
			s.SetAccess(ctx, root, "ban", nsapi.AccessRequest{Kind: "user", Value: fmt.Sprint(2000 + i)})
		}
		if rules > 0 {
			s.SetAccess(ctx, root, "limit", nsapi.AccessRequest{Kind: "user", Value: "3000", Arg: "10"})
		}
		b.Run(fmt.Sprintf("rules=%d", rules), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Admit(ctx, p); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
