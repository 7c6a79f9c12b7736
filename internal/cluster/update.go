package cluster

// Update sessions over the internal protocol (files that change in
// place). Namespace side:
//
//	POST /internal/v1/update/commit   message.UpdateCommit → message.UpdateResult
//	POST /internal/v1/update/stale    {Fid, Version, Stripe}
//	POST /internal/v1/update/version  {Fid} → message.FileVersion
//
// Storage side, for the entry server of an update session (the
// capability is the session's):
//
//	POST /kaon/v1/stripe/<fid hex>/<i>/prepare?cap=C  body: the journal's
//	     operations; Kaon-Journal-Head: the head (JSON)
//	POST /kaon/v1/stripe/<fid hex>/<i>/apply?cap=C
//	POST /kaon/v1/stripe/<fid hex>/<i>/discard?cap=C
//
// and for the namespace server (a truncation by path):
//
//	POST /internal/v1/truncate  Kaon-Capability: C, Kaon-Size: N

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// TruncatePath is the storage-side endpoint of a truncation by path.
const TruncatePath = "/internal/v1/truncate"

const (
	journalHeader = "Kaon-Journal-Head"
	sizeHeader    = "Kaon-Size"
	// applyNowHeader, in a prepare's answer: the stripe may be read
	// without a storage server, so its journal is applied before the
	// commit's reply (storage's Server.PrepareStripe).
	applyNowHeader = "Kaon-Apply-Now"
)

func handleUpdates(mux *http.ServeMux, ns message.Namespace, auth func(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc,
	decode func(r *http.Request, v any) error) {
	u, ok := ns.(message.Updates)
	if !ok {
		return
	}
	mux.HandleFunc("/internal/v1/update/commit", auth(func(w http.ResponseWriter, r *http.Request) error {
		var c message.UpdateCommit
		if err := decode(r, &c); err != nil {
			return err
		}
		res, err := u.CommitUpdate(r.Context(), c)
		if err != nil {
			return err
		}
		return WriteJSON(w, res)
	}))
	mux.HandleFunc("/internal/v1/update/stale", auth(func(w http.ResponseWriter, r *http.Request) error {
		var a staleArgs
		if err := decode(r, &a); err != nil {
			return err
		}
		if err := u.MarkStale(r.Context(), a.Fid, a.Version, a.Stripe); err != nil {
			return err
		}
		return WriteJSON(w, struct{}{})
	}))
	mux.HandleFunc("/internal/v1/update/version", auth(func(w http.ResponseWriter, r *http.Request) error {
		var a struct{ Fid uint64 }
		if err := decode(r, &a); err != nil {
			return err
		}
		v, err := u.FileVersion(r.Context(), a.Fid)
		if err != nil {
			return err
		}
		return WriteJSON(w, v)
	}))
}

type staleArgs struct {
	Fid, Version uint64
	Stripe       int
}

var _ message.Updates = (*Client)(nil)

// CommitUpdate implements message.Updates.
func (c *Client) CommitUpdate(ctx context.Context, u message.UpdateCommit) (message.FileVersion, error) {
	var r message.FileVersion
	err := c.call(ctx, "update/commit", u, &r)
	return r, err
}

// MarkStale implements message.Updates.
func (c *Client) MarkStale(ctx context.Context, fid, version uint64, stripe int) error {
	return c.call(ctx, "update/stale", staleArgs{fid, version, stripe}, nil)
}

// FileVersion implements message.Updates.
func (c *Client) FileVersion(ctx context.Context, fid uint64) (message.FileVersion, error) {
	var r message.FileVersion
	err := c.call(ctx, "update/version", struct{ Fid uint64 }{fid}, &r)
	return r, err
}

// StorageUpdates is the storage server core's part in update sessions
// run by a peer (package storage implements it).
type StorageUpdates interface {
	// PrepareStripe stores the journal ops of an update of stripe idx of
	// fid (the update capability token), with head h; applyNow: the
	// journal must be applied before the commit's reply.
	PrepareStripe(token string, fid uint64, idx int, h backend.JournalHead, ops io.Reader) (applyNow bool, err error)
	// ApplyStripe rolls the prepared journal forward, DiscardStripe drops it.
	ApplyStripe(token string, fid uint64, idx int) error
	DiscardStripe(token string, fid uint64, idx int) error
	// TruncateFile runs an update session of one truncation to size.
	TruncateFile(ctx context.Context, token string, size int64) error
}

// serveJournal serves the journal verbs of stripe idx of fid.
func serveJournal(s StorageServer, w http.ResponseWriter, r *http.Request, fid uint64, idx int, verb string) error {
	u, ok := s.(StorageUpdates)
	if !ok || r.Method != http.MethodPost {
		return kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "no such stripe operation")
	}
	token := r.URL.Query().Get("cap")
	var err error
	switch verb {
	case "prepare":
		var h backend.JournalHead
		if err := json.Unmarshal([]byte(r.Header.Get(journalHeader)), &h); err != nil {
			return kerr.Wrap(kerr.Invalid, "prepare", r.URL.Path, err)
		}
		var now bool
		if now, err = u.PrepareStripe(token, fid, idx, h, r.Body); now {
			w.Header().Set(applyNowHeader, "1")
		}
	case "apply":
		err = u.ApplyStripe(token, fid, idx)
	case "discard":
		err = u.DiscardStripe(token, fid, idx)
	default:
		return kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "no such stripe operation")
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func serveTruncate(s StorageServer, w http.ResponseWriter, r *http.Request) error {
	u, ok := s.(StorageUpdates)
	if !ok || r.Method != http.MethodPost {
		return kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "no such internal storage operation")
	}
	size, err := strconv.ParseInt(r.Header.Get(sizeHeader), 10, 64)
	if err != nil {
		return kerr.New(kerr.Invalid, "truncate", r.URL.Path, "bad "+sizeHeader)
	}
	if err := u.TruncateFile(r.Context(), r.Header.Get(capHeader), size); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (c *StorageClient) journalCall(ctx context.Context, verb, addr string, fid uint64, idx int, token string, body io.Reader, h *backend.JournalHead) (http.Header, error) {
	url := fmt.Sprintf("%s%s%x/%d/%s?cap=%s", addr, StripePath, fid, idx, verb, token)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, verb, addr, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	if h != nil {
		b, _ := json.Marshal(h)
		req.Header.Set(journalHeader, string(b))
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, kerr.New(kerr.Unavailable, verb, addr, fmt.Sprintf("stripe %d: storage server unreachable", idx)) // err holds the URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return nil, responseError(resp, verb, fmt.Sprintf("stripe %d on %s", idx, addr))
	}
	return resp.Header, nil
}

// PrepareStripe sends the journal of an update of stripe idx to the
// server at addr, which stores it durably beside the stripe (applyNow:
// it must be applied before the commit's reply).
func (c *StorageClient) PrepareStripe(ctx context.Context, addr string, fid uint64, idx int, token string, h backend.JournalHead, ops io.Reader) (applyNow bool, err error) {
	hd, err := c.journalCall(ctx, "prepare", addr, fid, idx, token, ops, &h)
	return err == nil && hd.Get(applyNowHeader) != "", err
}

// ApplyStripe rolls the prepared journal of stripe idx forward.
func (c *StorageClient) ApplyStripe(ctx context.Context, addr string, fid uint64, idx int, token string) error {
	_, err := c.journalCall(ctx, "apply", addr, fid, idx, token, nil, nil)
	return err
}

// DiscardStripe drops the prepared journal of stripe idx.
func (c *StorageClient) DiscardStripe(ctx context.Context, addr string, fid uint64, idx int, token string) error {
	_, err := c.journalCall(ctx, "discard", addr, fid, idx, token, nil, nil)
	return err
}

// Truncate asks the storage server at addr to truncate the file the
// update capability token names to size (a committed update).
func (c *StorageClient) Truncate(ctx context.Context, addr, token string, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(addr, "/")+TruncatePath, nil)
	if err != nil {
		return kerr.Wrap(kerr.Internal, "truncate", addr, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	req.Header.Set(capHeader, token)
	req.Header.Set(sizeHeader, strconv.FormatInt(size, 10))
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return kerr.Wrap(kerr.Unavailable, "truncate", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return responseError(resp, "truncate", addr)
	}
	return nil
}
