package cluster

// fsck over the internal protocol:
//
//	POST /internal/v1/fsck/scan        storage → namespace: a batch of a scan (message.FsckScan)
//	POST /internal/v1/fsck/unfinished  storage → namespace: which unfinished stripes are unknown (message.Unfinished)
//	POST /internal/v1/fsck/repair      namespace → storage: rebuild stripes (message.RepairJob)

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Paths of the fsck endpoints.
const (
	FsckScanPath       = "/internal/v1/fsck/scan"
	FsckUnfinishedPath = "/internal/v1/fsck/unfinished"
	FsckRepairPath     = "/internal/v1/fsck/repair"
)

var (
	_ message.Fsck      = (*Client)(nil)
	_ message.Leftovers = (*Client)(nil)
)

// FsckScan sends a batch of a scan to the namespace server.
func (c *Client) FsckScan(ctx context.Context, s message.FsckScan) error {
	return c.call(ctx, "fsck/scan", s, nil)
}

// Unfinished asks the namespace server which unfinished stripes it does
// not know.
func (c *Client) Unfinished(ctx context.Context, u message.Unfinished) (message.UnfinishedReply, error) {
	var r message.UnfinishedReply
	err := c.call(ctx, "fsck/unfinished", u, &r)
	return r, err
}

// handleFsck adds the namespace server's fsck endpoints to mux when ns
// takes scans and answers about unfinished stripes.
func handleFsck(mux *http.ServeMux, ns message.Namespace, auth func(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc,
	decode func(r *http.Request, v any) error) {
	if l, ok := ns.(message.Leftovers); ok {
		mux.HandleFunc(FsckUnfinishedPath, auth(func(w http.ResponseWriter, r *http.Request) error {
			var u message.Unfinished
			if err := decode(r, &u); err != nil {
				return err
			}
			reply, err := l.Unfinished(r.Context(), u)
			if err != nil {
				return err
			}
			return WriteJSON(w, reply)
		}))
	}
	f, ok := ns.(message.Fsck)
	if !ok {
		return
	}
	mux.HandleFunc(FsckScanPath, auth(func(w http.ResponseWriter, r *http.Request) error {
		var s message.FsckScan
		if err := decode(r, &s); err != nil {
			return err
		}
		if err := f.FsckScan(r.Context(), s); err != nil {
			return err
		}
		return WriteJSON(w, struct{}{})
	}))
}

// Repairer is a storage server as the namespace server's repairs reach it
// (package storage implements it).
type Repairer interface {
	Repair(ctx context.Context, job message.RepairJob) error
}

// RepairHandler serves FsckRepairPath for s; requests must carry secret.
func RepairHandler(s Repairer, secret string) http.Handler {
	want := bearerOf(secret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !carries(r, want) || r.Method != http.MethodPost {
			WriteError(w, kerr.New(kerr.Permission, "internal", r.URL.Path, "endpoint is for the namespace server only"))
			return
		}
		var job message.RepairJob
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&job); err != nil {
			WriteError(w, kerr.Wrap(kerr.Invalid, "repair", r.URL.Path, err))
			return
		}
		if err := s.Repair(r.Context(), job); err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, struct{}{})
	})
}

// Repair asks the storage server at addr (its HTTP base URL) to run job;
// it returns when the stripes are rebuilt, or why they could not be.
func (c *StorageClient) Repair(ctx context.Context, addr string, job message.RepairJob) error {
	body, _ := json.Marshal(job)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(addr, "/")+FsckRepairPath, bytes.NewReader(body))
	if err != nil {
		return kerr.Wrap(kerr.Internal, "repair", addr, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return kerr.Wrap(kerr.Unavailable, "repair", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return responseError(resp, "repair", addr)
	}
	return nil
}
