// Package cluster is the internal protocol between Kaon's servers. Between
// the namespace server and storage servers: heartbeats (registration,
// capacity, state, deletions), upload claims, commits and aborts; messages
// are versioned JSON over HTTP, and in the all-in-one process the storage
// server calls the namespace directly through the same interface. Between
// storage servers, and from the namespace server to a storage server:
// stripe transfer and whole-file reads (storage.go), data movement orders
// (move.go). Every request carries the internal bearer secret.
package cluster

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Client calls a remote namespace server. Base may name the servers of a
// replicated instance, comma-separated: requests go to the active one (a
// standby's 307 names it, and is followed when it is one of Base), and
// while none answers (a
// failover) they try the others for FailoverWait. Only requests that are
// safe to repeat (heartbeat, commit, abort: the namespace takes a repeated
// commit) are sent again after an ambiguous failure; a claim only when the
// server could not be reached at all.
type Client struct {
	Base   string // http://host:port[,http://host:port...]
	Secret string // shared internal bearer
	HTTP   *http.Client
	// With several servers: how long a request looks for the active one
	// (default 30s), and how long one attempt may take (default 10s, 3s
	// for a heartbeat: a frozen server must not hold it).
	FailoverWait   time.Duration
	AttemptTimeout time.Duration

	mu     sync.Mutex
	active string // the server that answered last
}

// maxRedirects bounds the standby redirects one attempt follows.
const maxRedirects = 5

func (c *Client) bases() []string {
	var out []string
	for _, b := range strings.Split(c.Base, ",") {
		if b = strings.TrimRight(strings.TrimSpace(b), "/"); b != "" {
			out = append(out, b)
		}
	}
	return out
}

func (c *Client) call(ctx context.Context, op string, in, out any) error {
	body, _ := json.Marshal(in)
	bases := c.bases()
	if len(bases) == 0 {
		return kerr.New(kerr.Invalid, op, "", "no namespace server configured")
	}
	ha := len(bases) > 1
	wait := c.FailoverWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	deadline := time.Now().Add(wait)
	c.mu.Lock()
	target := c.active
	c.mu.Unlock()
	if target == "" {
		target = bases[0]
	}
	var lastErr error
	for try, hops := 0, 0; ; {
		resp, err := c.attempt(ctx, target, op, body, ha)
		if err == nil {
			switch {
			case resp.StatusCode == http.StatusOK:
				c.mu.Lock()
				c.active = target
				c.mu.Unlock()
				data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
				resp.Body.Close()
				if out != nil {
					return json.Unmarshal(data, out)
				}
				return nil
			case resp.StatusCode == http.StatusTemporaryRedirect && hops < maxRedirects:
				loc, perr := url.Parse(resp.Header.Get("Location"))
				resp.Body.Close()
				next := ""
				if perr == nil {
					next = loc.Scheme + "://" + loc.Host
				}
				if !slices.Contains(bases, next) {
					// The bearer goes only to the servers we were given.
					return kerr.New(kerr.Invalid, op, target, fmt.Sprintf("redirected to %q, which is not among the namespace servers given (%s)", next, c.Base))
				}
				hops++
				target = next
				continue
			case resp.StatusCode == http.StatusServiceUnavailable && ha:
				lastErr = responseError(resp, op, target)
				resp.Body.Close()
				if kerr.Is(lastErr, kerr.Aborted) {
					return lastErr // the active server's answer: another has no other
				}
			default:
				defer resp.Body.Close()
				return responseError(resp, op, target)
			}
		} else {
			lastErr = kerr.Wrap(kerr.Busy, op, target, err)
			if !ha || (op == "claim" && !unreached(err)) {
				return lastErr
			}
		}
		if !ha || ctx.Err() != nil || time.Now().After(deadline) {
			return lastErr
		}
		// The next server; a short pause after each full round.
		try, hops = try+1, 0
		target = bases[try%len(bases)]
		if try%len(bases) == 0 {
			select {
			case <-time.After(250 * time.Millisecond):
			case <-ctx.Done():
				return lastErr
			}
		}
	}
}

// attempt sends one request to base; redirects are returned, not followed
// (a standby's points at the active server: the caller follows it only to
// a server it was given, and remembers it).
func (c *Client) attempt(ctx context.Context, base, op string, body []byte, ha bool) (*http.Response, error) {
	if ha {
		t := c.AttemptTimeout
		if t <= 0 {
			t = 10 * time.Second
		}
		if op == "heartbeat" { // sent every second: a slow one is better sent elsewhere
			t = min(t, 3*time.Second)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer func() {
			if cancel != nil {
				cancel()
			}
		}()
		resp, err := c.send(ctx, base, op, body)
		if err == nil { // the body is read after this returns: cancel with it
			resp.Body = cancelOnClose{resp.Body, cancel}
			cancel = nil
		}
		return resp, err
	}
	return c.send(ctx, base, op, body)
}

func (c *Client) send(ctx context.Context, base, op string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/internal/v1/"+op, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	req.Header.Set("Content-Type", "application/json")
	hc := noRedirects
	if c.HTTP != nil {
		cp := *c.HTTP
		cp.CheckRedirect = noRedirects.CheckRedirect
		hc = &cp
	}
	return hc.Do(req)
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// unreached reports a request that never reached the server (it could not
// be connected to), so sending it elsewhere cannot repeat it.
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (c *Client) Heartbeat(ctx context.Context, hb message.Heartbeat) (message.HeartbeatReply, error) {
	hb.Version = message.Version
	var r message.HeartbeatReply
	err := c.call(ctx, "heartbeat", hb, &r)
	return r, err
}

func (c *Client) Commit(ctx context.Context, cm message.Commit) error {
	return c.call(ctx, "commit", cm, nil)
}

func (c *Client) Claim(ctx context.Context, fid uint64) error {
	return c.call(ctx, "claim", map[string]uint64{"fid": fid}, nil)
}

func (c *Client) Abort(ctx context.Context, fid uint64) error {
	return c.call(ctx, "abort", map[string]uint64{"fid": fid}, nil)
}

// responseError is the Kaon error an error response from where carries.
func responseError(resp *http.Response, op, where string) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e ErrorBody
	if json.Unmarshal(data, &e) == nil && e.Message != "" {
		// The message is the remote error's whole text, its operation
		// included ("commit fid 7: ..."): naming op again doubled it.
		return &kerr.Error{Kind: kerr.Kind(e.Kind), Msg: e.Message}
	}
	return kerr.New(kerr.Internal, op, where, fmt.Sprintf("HTTP %d", resp.StatusCode))
}

// bearerOf is the Authorization value of requests carrying secret.
func bearerOf(secret string) []byte { return []byte("Bearer " + secret) }

// carries reports whether r's Authorization is want (bearerOf the
// internal secret), compared in constant time: the secret signs
// capabilities, so its bytes must not leak through the time a refusal
// takes.
func carries(r *http.Request, want []byte) bool {
	return subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) == 1
}

// ErrorBody is the JSON error every Kaon JSON endpoint returns.
type ErrorBody struct {
	Kind    int    `json:"kind"`
	Message string `json:"message"`
}

// Handler serves the internal protocol for ns; requests must carry secret.
func Handler(ns message.Namespace, secret string) http.Handler {
	mux := http.NewServeMux()
	want := bearerOf(secret)
	auth := func(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || !carries(r, want) {
				WriteError(w, kerr.New(kerr.Permission, "internal", r.URL.Path, "not authorized"))
				return
			}
			if err := h(w, r); err != nil {
				WriteError(w, err)
			}
		}
	}
	decode := func(r *http.Request, v any) error {
		if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(v); err != nil {
			return kerr.Wrap(kerr.Invalid, "internal", r.URL.Path, err)
		}
		return nil
	}
	mux.HandleFunc("/internal/v1/heartbeat", auth(func(w http.ResponseWriter, r *http.Request) error {
		var hb message.Heartbeat
		if err := decode(r, &hb); err != nil {
			return err
		}
		if hb.Version != message.Version {
			return kerr.New(kerr.Invalid, "heartbeat", hb.Node, fmt.Sprintf("protocol version %d, namespace speaks %d", hb.Version, message.Version))
		}
		reply, err := ns.Heartbeat(r.Context(), hb)
		if err != nil {
			return err
		}
		return WriteJSON(w, reply)
	}))
	mux.HandleFunc("/internal/v1/commit", auth(func(w http.ResponseWriter, r *http.Request) error {
		var c message.Commit
		if err := decode(r, &c); err != nil {
			return err
		}
		if err := ns.Commit(r.Context(), c); err != nil {
			return err
		}
		return WriteJSON(w, struct{}{})
	}))
	byFid := func(fn func(ctx context.Context, fid uint64) error) http.HandlerFunc {
		return auth(func(w http.ResponseWriter, r *http.Request) error {
			var a struct{ Fid uint64 }
			if err := decode(r, &a); err != nil {
				return err
			}
			if err := fn(r.Context(), a.Fid); err != nil {
				return err
			}
			return WriteJSON(w, struct{}{})
		})
	}
	mux.HandleFunc("/internal/v1/claim", byFid(ns.Claim))
	mux.HandleFunc("/internal/v1/abort", byFid(ns.Abort))
	handleFsck(mux, ns, auth, decode)
	handleUpdates(mux, ns, auth, decode)
	return mux
}

// SetRetryAfter sets the Retry-After header an error of kind k answers
// with (kerr.RetryAfter), if any.
func SetRetryAfter(w http.ResponseWriter, k kerr.Kind) {
	if secs := kerr.RetryAfter(k); secs > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
}

// WriteJSON writes v as a 200 JSON response.
func WriteJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}

// WriteError writes err as a JSON error with the matching HTTP status.
func WriteError(w http.ResponseWriter, err error) {
	k := kerr.KindOf(err)
	w.Header().Set("Content-Type", "application/json")
	SetRetryAfter(w, k)
	w.WriteHeader(kerr.HTTPStatus(k))
	_ = json.NewEncoder(w).Encode(ErrorBody{Kind: int(k), Message: err.Error()})
}
