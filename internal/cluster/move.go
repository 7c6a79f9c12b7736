package cluster

// Data movement orders from the namespace server to storage servers
// (message.MoveOrder, message.ConvertOrder), over the storage servers'
// HTTP listener with the internal bearer secret:
//
//	POST /internal/v1/move     a MoveOrder; answers a MoveResult once the
//	                           new stripe is durable and verified
//	POST /internal/v1/convert  a ConvertOrder; answers a ConvertResult once
//	                           the staged copy is finished
//
// The request lasts as long as the copy; when the namespace server goes
// away (its connection closes) the copy is cancelled and removed.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Paths of the movement endpoints.
const (
	MovePath    = "/internal/v1/move"
	ConvertPath = "/internal/v1/convert"
)

// Mover is the storage server as the namespace server orders moves
// (package storage implements it).
type Mover interface {
	MoveStripe(ctx context.Context, o message.MoveOrder) (message.MoveResult, error)
	Convert(ctx context.Context, o message.ConvertOrder) (message.ConvertResult, error)
}

// MoveHandler serves MovePath and ConvertPath for m; requests must carry
// secret.
func MoveHandler(m Mover, secret string, log *slog.Logger) http.Handler {
	want := bearerOf(secret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(err error) {
			log.Info("movement order failed", "path", r.URL.Path, "err", err)
			WriteError(w, err)
		}
		if r.Method != http.MethodPost || !carries(r, want) {
			fail(kerr.New(kerr.Permission, "internal", r.URL.Path, "endpoint is for the namespace server only"))
			return
		}
		body := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		var out any
		var err error
		switch r.URL.Path {
		case MovePath:
			var o message.MoveOrder
			if err = body.Decode(&o); err == nil {
				out, err = m.MoveStripe(r.Context(), o)
			}
		case ConvertPath:
			var o message.ConvertOrder
			if err = body.Decode(&o); err == nil {
				out, err = m.Convert(r.Context(), o)
			}
		default:
			err = kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "no such movement order")
		}
		if err != nil {
			fail(err)
			return
		}
		_ = WriteJSON(w, out)
	})
}

// MoveStripe orders the storage server at addr (its HTTP base URL) to
// carry out a stripe move and waits for the outcome.
func (c *StorageClient) MoveStripe(ctx context.Context, addr string, o message.MoveOrder) (message.MoveResult, error) {
	var res message.MoveResult
	err := c.order(ctx, addr, MovePath, "move", o, &res)
	return res, err
}

// Convert orders the storage server at addr to make a conversion's
// staged copy and waits for the outcome.
func (c *StorageClient) Convert(ctx context.Context, addr string, o message.ConvertOrder) (message.ConvertResult, error) {
	var res message.ConvertResult
	err := c.order(ctx, addr, ConvertPath, "convert", o, &res)
	return res, err
}

func (c *StorageClient) order(ctx context.Context, addr, path, op string, in, out any) error {
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(addr, "/")+path, bytes.NewReader(b))
	if err != nil {
		return kerr.Wrap(kerr.Internal, op, addr, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		// err holds the URL only, never the order's capability.
		return kerr.New(kerr.Unavailable, op, addr, "storage server unreachable: "+unwrapURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return responseError(resp, op, addr)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return kerr.Wrap(kerr.IO, op, addr, err)
	}
	return nil
}

// unwrapURL is the cause of an http.Client error without the URL.
func unwrapURL(err error) string {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && u.Unwrap() != nil {
		return u.Unwrap().Error()
	}
	return err.Error()
}
