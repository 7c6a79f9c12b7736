// Package cluster is the internal protocol between the namespace server and
// storage servers: heartbeats (registration, capacity, state, deletions),
// upload commits and aborts. Messages are versioned JSON over HTTP; in the
// all-in-one process the storage server calls the namespace directly
// through the same interface.
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Version of the messages below; a peer with another version is refused.
// Version 2: storage servers claim an upload before writing it.
const Version = 2

// FsReport is what a storage server says about one of its filesystems.
type FsReport struct {
	ID       uint32 `json:"id"` // 0 for a path the namespace has not numbered yet
	Path     string `json:"path"`
	Capacity uint64 `json:"capacity"`
	Used     uint64 `json:"used"`
	Files    int64  `json:"files"`
	Health   string `json:"health"` // "ok" or the reason it is not
	// Offline says why the filesystem cannot be used at all (its root or
	// identity marker is missing or not its own); "" when it can.
	Offline string `json:"offline,omitempty"`
}

// Heartbeat registers a storage server and its filesystems.
type Heartbeat struct {
	Version     int        `json:"version"`
	Node        string     `json:"node"` // stable node name, host:port
	Addr        string     `json:"addr"` // HTTP base URL of the data endpoint
	XrdAddr     string     `json:"xrd,omitempty"`
	Filesystems []FsReport `json:"filesystems"`
	Done        []Deletion `json:"done,omitempty"` // deletions carried out since last beat
}

// FsAssignment tells a storage server which filesystems to serve and how.
type FsAssignment struct {
	ID           uint32 `json:"id"`
	Path         string `json:"path"`
	UUID         string `json:"uuid"`
	ConfigStatus string `json:"configstatus"` // rw, ro, drain, off
	// Init asks the storage server to create the filesystem (its root and
	// identity marker): it is registered but was never seen initialized.
	Init bool `json:"init,omitempty"`
}

// Deletion is one physical stripe to remove.
type Deletion struct {
	FsID   uint32 `json:"fsid"`
	Fid    uint64 `json:"fid"`
	Stripe int    `json:"stripe"`
}

// HeartbeatReply answers a heartbeat.
type HeartbeatReply struct {
	Filesystems []FsAssignment `json:"filesystems"`
	Deletions   []Deletion     `json:"deletions,omitempty"`
	Interval    time.Duration  `json:"interval"`
}

// Commit reports a completed upload.
type Commit struct {
	Fid       uint64            `json:"fid"`
	Size      int64             `json:"size"`
	Checksums map[string]string `json:"checksums"`
}

// Namespace is what a storage server needs from the namespace server.
type Namespace interface {
	Heartbeat(ctx context.Context, hb Heartbeat) (HeartbeatReply, error)
	// Claim is called before the first byte of an upload is stored: it
	// fails unless fid is a pending upload nobody has claimed yet, so a
	// write capability is good for exactly one upload.
	Claim(ctx context.Context, fid uint64) error
	Commit(ctx context.Context, c Commit) error
	Abort(ctx context.Context, fid uint64) error
}

// Client calls a remote namespace server.
type Client struct {
	Base   string // http://host:port
	Secret string // shared internal bearer
	HTTP   *http.Client
}

func (c *Client) call(ctx context.Context, op string, in, out any) error {
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.Base, "/")+"/internal/v1/"+op, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return kerr.Wrap(kerr.Busy, op, c.Base, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode != http.StatusOK {
		var e ErrorBody
		if json.Unmarshal(data, &e) == nil && e.Message != "" {
			return &kerr.Error{Kind: kerr.Kind(e.Kind), Op: op, Msg: e.Message}
		}
		return kerr.New(kerr.Internal, op, c.Base, fmt.Sprintf("HTTP %d", resp.StatusCode))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (c *Client) Heartbeat(ctx context.Context, hb Heartbeat) (HeartbeatReply, error) {
	hb.Version = Version
	var r HeartbeatReply
	err := c.call(ctx, "heartbeat", hb, &r)
	return r, err
}

func (c *Client) Commit(ctx context.Context, cm Commit) error { return c.call(ctx, "commit", cm, nil) }

func (c *Client) Claim(ctx context.Context, fid uint64) error {
	return c.call(ctx, "claim", map[string]uint64{"fid": fid}, nil)
}

func (c *Client) Abort(ctx context.Context, fid uint64) error {
	return c.call(ctx, "abort", map[string]uint64{"fid": fid}, nil)
}

// ErrorBody is the JSON error every Kaon JSON endpoint returns.
type ErrorBody struct {
	Kind    int    `json:"kind"`
	Message string `json:"message"`
}

// Handler serves the internal protocol for ns; requests must carry secret.
func Handler(ns Namespace, secret string) http.Handler {
	mux := http.NewServeMux()
	auth := func(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+secret {
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
		var hb Heartbeat
		if err := decode(r, &hb); err != nil {
			return err
		}
		if hb.Version != Version {
			return kerr.New(kerr.Invalid, "heartbeat", hb.Node, fmt.Sprintf("protocol version %d, namespace speaks %d", hb.Version, Version))
		}
		reply, err := ns.Heartbeat(r.Context(), hb)
		if err != nil {
			return err
		}
		return WriteJSON(w, reply)
	}))
	mux.HandleFunc("/internal/v1/commit", auth(func(w http.ResponseWriter, r *http.Request) error {
		var c Commit
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
	return mux
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
	w.WriteHeader(kerr.HTTPStatus(k))
	_ = json.NewEncoder(w).Encode(ErrorBody{Kind: int(k), Message: err.Error()})
}
