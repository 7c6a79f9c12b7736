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
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

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
	if resp.StatusCode != http.StatusOK {
		return responseError(resp, op, c.Base)
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
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
		return &kerr.Error{Kind: kerr.Kind(e.Kind), Op: op, Msg: e.Message}
	}
	return kerr.New(kerr.Internal, op, where, fmt.Sprintf("HTTP %d", resp.StatusCode))
}

// ErrorBody is the JSON error every Kaon JSON endpoint returns.
type ErrorBody struct {
	Kind    int    `json:"kind"`
	Message string `json:"message"`
}

// Handler serves the internal protocol for ns; requests must carry secret.
func Handler(ns message.Namespace, secret string) http.Handler {
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
