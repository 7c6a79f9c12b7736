package nsserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os/user"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Access rules (kaon access, nsapi.AccessRules) and who is connected
// (kaon who). Every front end calls Admit once per request, after
// authenticating its client and before serving it: the rules are decided
// here, for every protocol, and an open connection meets a new rule at
// its next request. The rules live in the namespace's engine (setting
// "access"), so they survive restarts and every server of a replicated
// instance applies them; the active server keeps them in memory.
//
// The admin role (auth.RequireAdmin) is exempt: an operator cannot lock
// the instance's administration out by banning its own host.

// accessSetting is the namespace setting that holds the rules.
const accessSetting = "access"

// access is the service's state of its access rules.
type access struct {
	rules atomic.Pointer[nsapi.AccessRules] // never nil once New returned

	mu      sync.Mutex // changes of the rules; buckets
	buckets map[nsapi.Subject]*bucket

	seen clients
}

// loadAccess reads the rules from the namespace.
func (s *Server) loadAccess() error {
	r := &nsapi.AccessRules{}
	b, err := s.ns.Setting(accessSetting)
	if err != nil {
		return err
	}
	if b != nil {
		if err := json.Unmarshal(b, r); err != nil {
			return kerr.Wrap(kerr.Internal, "access rules", accessSetting, err)
		}
	}
	s.access.rules.Store(r)
	s.access.buckets = map[nsapi.Subject]*bucket{}
	return nil
}

// Admit decides whether the namespace serves a request of p now: nil, or
// why not (kerr.Permission naming the ban or the allow list, kerr.Busy
// for a stall or a rate limit, a *nsapi.Redirect). It also records p as
// a client (kaon who).
func (s *Server) Admit(ctx context.Context, p auth.Principal) error {
	now := s.now()
	s.access.seen.note(auth.Protocol(ctx), p, now)
	if auth.RequireAdmin(p, "") == nil {
		return nil
	}
	r := s.access.rules.Load()
	for _, b := range r.Bans {
		if matches(b, p) {
			return kerr.New(kerr.Permission, "", "", fmt.Sprintf("access refused: %s is banned on this instance", b))
		}
	}
	for _, kind := range nsapi.SubjectKinds {
		listed, allowed := false, false
		for _, a := range r.Allows {
			if a.Kind == kind {
				listed = true
				allowed = allowed || matches(a, p)
			}
		}
		if listed && !allowed {
			return kerr.New(kerr.Permission, "", "", fmt.Sprintf("access refused: this %s is not on the instance's allow list", kind))
		}
	}
	for _, st := range r.Stalls {
		if st.Subject == nil || matches(*st.Subject, p) {
			return kerr.New(kerr.Busy, "", "", fmt.Sprintf("stalled by the operator: come back in %d s", st.Seconds))
		}
	}
	for _, rd := range r.Redirects {
		if rd.Subject == nil || matches(*rd.Subject, p) {
			return &nsapi.Redirect{XRootD: rd.XRootD, HTTP: rd.HTTP}
		}
	}
	for _, l := range r.Limits {
		if matches(l.Subject, p) {
			if err := s.access.take(l, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// take takes a request from the bucket of limit l, or says why not.
func (a *access) take(l nsapi.AccessLimit, now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.buckets[l.Subject]
	if b == nil || b.rate != l.Rate {
		b = newBucket(l.Rate, now)
		a.buckets[l.Subject] = b
	}
	if !b.take(now) {
		return kerr.New(kerr.Busy, "", "", fmt.Sprintf("rate limit of %s: %g operations per second, retry", l.Subject, l.Rate))
	}
	return nil
}

// matches says whether rule subject x names p.
func matches(x nsapi.Subject, p auth.Principal) bool {
	switch x.Kind {
	case nsapi.SubjectUser:
		uid, err := strconv.ParseUint(x.Value, 10, 32)
		return err == nil && uint32(uid) == p.UID
	case nsapi.SubjectGroup:
		gid, err := strconv.ParseUint(x.Value, 10, 32)
		return err == nil && (uint32(gid) == p.GID || slices.Contains(p.Groups, uint32(gid)))
	case nsapi.SubjectHost:
		return p.Host != "" && x.Value == p.Host
	case nsapi.SubjectTokenSubject:
		return p.Subject != "" && x.Value == p.Subject
	}
	return false
}

// bucket is a token bucket: rate operations per second, holding at most
// a tenth of a second's worth (at least one), so that what it admits over
// any window of seconds exceeds the rate by a tenth of a second's worth
// at most.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newBucket(rate float64, now time.Time) *bucket {
	burst := max(1, rate/10)
	return &bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

func (b *bucket) take(now time.Time) bool {
	if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = min(b.burst, b.tokens+d*b.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// AccessRules returns the access rules (admin only).
func (s *Server) AccessRules(_ context.Context, p auth.Principal) (nsapi.AccessRules, error) {
	if err := requireRoot(p, "access ls"); err != nil {
		return nsapi.AccessRules{}, err
	}
	return *s.access.rules.Load(), nil
}

// SetAccess changes the access rules (admin only): verb is ban, unban,
// allow, unallow, stall, redirect or limit (nsapi.AccessRequest).
func (s *Server) SetAccess(ctx context.Context, p auth.Principal, verb string, r nsapi.AccessRequest) (err error) {
	op := "access " + verb
	defer func() { err = s.audit(ctx, p, op, r.Kind+" "+r.Value, r.Arg, err) }()
	if err := requireRoot(p, op); err != nil {
		return err
	}
	sub, err := r.SubjectOf(op)
	if err != nil {
		return err
	}
	if sub != nil {
		if sub.Value, err = resolve(op, *sub); err != nil {
			return err
		}
	}
	s.access.mu.Lock()
	defer s.access.mu.Unlock()
	next, err := changed(*s.access.rules.Load(), op, verb, sub, r.Arg)
	if err != nil {
		return err
	}
	return s.storeAccess(next)
}

// storeAccess saves rules r and applies them (s.access.mu held).
func (s *Server) storeAccess(r nsapi.AccessRules) error {
	b, err := json.Marshal(r)
	if err != nil {
		return kerr.Wrap(kerr.Internal, "access", accessSetting, err)
	}
	if err := s.ns.SaveSetting(accessSetting, b); err != nil {
		return err
	}
	s.access.rules.Store(&r)
	return nil
}

// changed is rules r after verb (on subject sub, with argument arg).
func changed(r nsapi.AccessRules, op, verb string, sub *nsapi.Subject, arg string) (nsapi.AccessRules, error) {
	need := func() error {
		if sub == nil {
			return kerr.New(kerr.Invalid, op, "", "name a subject: --user, --group, --host or --token-subject")
		}
		return nil
	}
	same := func(x *nsapi.Subject) bool { return (x == nil && sub == nil) || (x != nil && sub != nil && *x == *sub) }
	switch verb {
	case "ban", "allow":
		if err := need(); err != nil {
			return r, err
		}
		list := &r.Bans
		if verb == "allow" {
			list = &r.Allows
		}
		if !slices.Contains(*list, *sub) {
			*list = append(slices.Clone(*list), *sub)
		}
	case "unban", "unallow":
		if err := need(); err != nil {
			return r, err
		}
		list := &r.Bans
		if verb == "unallow" {
			list = &r.Allows
		}
		i := slices.Index(*list, *sub)
		if i < 0 {
			return r, kerr.New(kerr.NotFound, op, sub.String(), "no such rule (kaon access ls)")
		}
		*list = slices.Delete(slices.Clone(*list), i, i+1)
	case "stall":
		secs, err := strconv.Atoi(arg)
		if err != nil || secs < 0 {
			return r, kerr.New(kerr.Invalid, op, arg, "want the seconds clients are asked to wait (0 lifts the stall)")
		}
		r.Stalls = slices.DeleteFunc(slices.Clone(r.Stalls), func(x nsapi.AccessStall) bool { return same(x.Subject) })
		if secs > 0 {
			r.Stalls = append(r.Stalls, nsapi.AccessStall{Subject: sub, Seconds: secs})
		}
	case "redirect":
		r.Redirects = slices.DeleteFunc(slices.Clone(r.Redirects), func(x nsapi.AccessTarget) bool { return same(x.Subject) })
		if arg != "" {
			t, err := nsapi.ParseTarget(op, arg)
			if err != nil {
				return r, err
			}
			t.Subject = sub
			r.Redirects = append(r.Redirects, t)
		}
	case "limit":
		if err := need(); err != nil {
			return r, err
		}
		if sub.Kind != nsapi.SubjectUser && sub.Kind != nsapi.SubjectGroup {
			return r, kerr.New(kerr.Invalid, op, sub.String(), "a rate limit applies to a user or a group")
		}
		rate, err := nsapi.ParseRate(op, arg)
		if err != nil {
			return r, err
		}
		r.Limits = slices.DeleteFunc(slices.Clone(r.Limits), func(x nsapi.AccessLimit) bool { return x.Subject == *sub })
		if rate > 0 {
			r.Limits = append(r.Limits, nsapi.AccessLimit{Subject: *sub, Rate: rate})
		}
	default:
		return r, kerr.New(kerr.Invalid, op, verb, "unknown access verb")
	}
	return r, nil
}

// resolve is the value a rule stores for subject x: users and groups by
// number (a name is looked up now).
func resolve(op string, x nsapi.Subject) (string, error) {
	switch x.Kind {
	case nsapi.SubjectUser:
		if _, err := strconv.ParseUint(x.Value, 10, 32); err == nil {
			return x.Value, nil
		}
		u, err := user.Lookup(x.Value)
		if err != nil {
			return "", kerr.New(kerr.Invalid, op, x.Value, "no such local user (name it by uid)")
		}
		return u.Uid, nil
	case nsapi.SubjectGroup:
		if _, err := strconv.ParseUint(x.Value, 10, 32); err == nil {
			return x.Value, nil
		}
		g, err := user.LookupGroup(x.Value)
		if err != nil {
			return "", kerr.New(kerr.Invalid, op, x.Value, "no such local group (name it by gid)")
		}
		return g.Gid, nil
	}
	return x.Value, nil
}

// whoWindow is how long after its last request a client is listed by
// `kaon who`.
const whoWindow = 5 * time.Minute

// clients are who the service served lately, by protocol, method,
// identity and host.
type clients struct {
	mu    sync.Mutex
	m     map[clientKey]*nsapi.Client
	rates map[string]*minute // requests by protocol
}

// minute counts requests over the last minute in one-second slots.
type minute struct {
	total  int64
	counts [60]int64
	secs   [60]int64 // the unix second each slot counts
}

func (m *minute) add(now time.Time) {
	sec := now.Unix()
	i := sec % 60
	if m.secs[i] != sec {
		m.secs[i], m.counts[i] = sec, 0
	}
	m.counts[i]++
	m.total++
}

// rate is the requests per second over the minute before now.
func (m *minute) rate(now time.Time) float64 {
	var n int64
	for i, sec := range m.secs {
		if d := now.Unix() - sec; d >= 0 && d < 60 {
			n += m.counts[i]
		}
	}
	return float64(n) / 60
}

type clientKey struct {
	protocol, method, name, host string
	uid                          uint32
}

// note records a request of p over protocol at now.
func (c *clients) note(protocol string, p auth.Principal, now time.Time) {
	k := clientKey{protocol, p.Method, p.Name, p.Host, p.UID}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m, c.rates = map[clientKey]*nsapi.Client{}, map[string]*minute{}
	}
	r := c.rates[protocol]
	if r == nil {
		r = &minute{}
		c.rates[protocol] = r
	}
	r.add(now)
	e := c.m[k]
	if e == nil {
		if len(c.m) >= 4096 {
			c.prune(now)
		}
		e = &nsapi.Client{Protocol: protocol, Method: p.Method, Name: p.Name, UID: p.UID, Host: p.Host, First: now}
		c.m[k] = e
	}
	e.Last = now
	e.Requests++
}

// prune forgets the clients idle for longer than whoWindow (c.mu held).
func (c *clients) prune(now time.Time) {
	for k, e := range c.m {
		if now.Sub(e.Last) > whoWindow {
			delete(c.m, k)
		}
	}
}

// Clients lists the clients served in the last whoWindow, by protocol,
// host and name (admin only: kaon who).
func (s *Server) Clients(_ context.Context, p auth.Principal) ([]nsapi.Client, error) {
	if err := requireRoot(p, "who"); err != nil {
		return nil, err
	}
	c := &s.access.seen
	c.mu.Lock()
	c.prune(s.now())
	out := make([]nsapi.Client, 0, len(c.m))
	for _, e := range c.m {
		out = append(out, *e)
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Protocol != b.Protocol {
			return a.Protocol < b.Protocol
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		return a.Name < b.Name
	})
	return out, nil
}
