package httpfront

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/srr"
)

// storageReport is the WLCG Storage Resource Report of the instance as
// the client of r reaches it: its endpoint is r's scheme and host.
func (f *Namespace) storageReport(ctx context.Context, r *http.Request) (srr.Document, error) {
	spaces, quotas, err := f.NS.StorageShares(ctx)
	if err != nil {
		return srr.Document{}, err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	ep := srr.Endpoint{Name: scheme, InterfaceType: scheme, InterfaceVersion: "1.1", EndpointURL: scheme + "://" + r.Host}
	return srr.Build(srr.Input{Name: host, Endpoints: []srr.Endpoint{ep}, Spaces: spaces, Quotas: quotas, Now: time.Now()}), nil
}

// serveSRR answers GET and HEAD of the report at --srr-path, to any
// client without authenticating it, like the token discovery documents:
// WLCG accounting and Rucio read it without credentials, also from
// instances that admit no anonymous client, and it names no disk, node,
// file or user.
func (f *Namespace) serveSRR(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSONError(w, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "method not allowed"))
		return
	}
	doc, err := f.storageReport(r.Context(), r)
	if err != nil {
		writeJSONError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "max-age=60")
	writeJSON(w, doc)
}
