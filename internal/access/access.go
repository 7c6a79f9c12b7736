// Package access decides the namespace service's access rules (kaon
// access, nsapi.AccessRules): whom it refuses (bans, allow lists), whom it
// asks to come back (stalls, rate limits) or sends elsewhere (redirects),
// and it counts the clients it served (kaon who) and their requests by
// protocol (kaon ns stat). nsserver owns a Service: it stores the rules in
// the namespace's engine, authorizes and audits their changes, and calls
// Admit for every request a front end sends.
package access

import (
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

// Service holds the rules in force, the rate limits' buckets and the
// clients seen. It is safe for concurrent use.
type Service struct {
	rules   atomic.Pointer[nsapi.AccessRules]
	mu      sync.Mutex // buckets
	buckets map[nsapi.Subject]*bucket
	seen    clients
}

// New is a service applying rules r.
func New(r nsapi.AccessRules) *Service {
	s := &Service{buckets: map[nsapi.Subject]*bucket{}}
	s.rules.Store(&r)
	return s
}

// Rules are the rules in force.
func (s *Service) Rules() nsapi.AccessRules { return *s.rules.Load() }

// Set puts rules r in force.
func (s *Service) Set(r nsapi.AccessRules) { s.rules.Store(&r) }

// Admit decides whether a request of p over protocol is served now: nil,
// or why not (kerr.Permission naming the ban or the allow list, kerr.Busy
// for a stall or a rate limit, a *nsapi.Redirect). It also counts p as a
// client. The admin role (auth.RequireAdmin) is exempt: an operator
// cannot lock the instance's administration out by banning its own host.
func (s *Service) Admit(protocol string, p auth.Principal, now time.Time) error {
	s.seen.note(protocol, p, now)
	if auth.RequireAdmin(p, "") == nil {
		return nil
	}
	r := s.rules.Load()
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
			if err := s.take(l, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// take takes a request from the bucket of limit l, or says why not.
func (s *Service) take(l nsapi.AccessLimit, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[l.Subject]
	if b == nil || b.rate != l.Rate {
		b = newBucket(l.Rate, now)
		s.buckets[l.Subject] = b
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

// Changed is rules r after verb (ban, unban, allow, unallow, stall,
// redirect, limit) on subject sub with argument arg; op names the
// request in errors.
func Changed(r nsapi.AccessRules, op, verb string, sub *nsapi.Subject, arg string) (nsapi.AccessRules, error) {
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

// Resolve is the value a rule stores for subject x: users and groups by
// number (a name is looked up now).
func Resolve(op string, x nsapi.Subject) (string, error) {
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

// WhoWindow is how long after its last request a client is listed by
// `kaon who`.
const WhoWindow = 5 * time.Minute

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

// prune forgets the clients idle for longer than WhoWindow (c.mu held).
func (c *clients) prune(now time.Time) {
	for k, e := range c.m {
		if now.Sub(e.Last) > WhoWindow {
			delete(c.m, k)
		}
	}
}

// Clients lists the clients served in the last WhoWindow, by protocol,
// host and name.
func (s *Service) Clients(now time.Time) []nsapi.Client {
	c := &s.seen
	c.mu.Lock()
	c.prune(now)
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
	return out
}

// Requests are the requests per second over the last minute and since
// the start, by protocol.
func (s *Service) Requests(now time.Time) (rates map[string]float64, total map[string]int64) {
	rates, total = map[string]float64{}, map[string]int64{}
	c := &s.seen
	c.mu.Lock()
	defer c.mu.Unlock()
	for proto, m := range c.rates {
		rates[proto], total[proto] = m.rate(now), m.total
	}
	return rates, total
}
