package xrootd_test

import (
	"context"
	"encoding/binary"
	"net"
	"testing"

	"github.com/kaon-storage/kaon/internal/xrootd"
)

// standbyNS answers every request with a redirect to another manager, as
// a standby namespace server does.
type standbyNS struct{ xrootd.Namespace }

var toActive = &xrootd.RedirectError{Host: "active.example", Port: 1095}

func (standbyNS) Stat(context.Context, xrootd.Identity, string) (xrootd.FileInfo, error) {
	return xrootd.FileInfo{}, toActive
}

func (standbyNS) Open(context.Context, xrootd.Identity, string, xrootd.OpenRequest) (xrootd.Redirect, error) {
	return xrootd.Redirect{}, toActive
}

func TestNamespaceRedirectError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := xrootd.NewServer(xrootd.Config{Namespace: standbyNS{}})
	go srv.Serve(l)
	defer srv.Close()
	w := dialWire(t, l.Addr().String(), true)
	check := func(what string, r resp) {
		t.Helper()
		if r.status != 4004 || len(r.body) < 4 || binary.BigEndian.Uint32(r.body) != 1095 || string(r.body[4:]) != "active.example" {
			t.Fatalf("%s at a standby: status %d body %q, want kXR_redirect to active.example:1095", what, r.status, r.body)
		}
	}
	check("stat", w.call(3017, [16]byte{}, []byte("/x")))
	var o [16]byte
	binary.BigEndian.PutUint16(o[2:], 0x0010) // kXR_open_read
	check("open", w.call(3010, o, []byte("/x")))
}
