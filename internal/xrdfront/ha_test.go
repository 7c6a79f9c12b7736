package xrdfront

import (
	"context"
	"errors"
	"testing"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// TestHAWithoutRootListener: a standby whose active server is known but
// serves no root:// (or an unusable address) answers with the reason; it
// used to hand the caller a nil namespace and a nil error.
func TestHAWithoutRootListener(t *testing.T) {
	for _, active := range []string{"", "no-port", "h:99999"} {
		h := HA{Route: func() (xrootd.Namespace, string, error) { return nil, active, nil }}
		_, err := h.Stat(context.Background(), xrootd.Identity{}, "/f")
		if !kerr.Is(err, kerr.Down) {
			t.Errorf("active %q: Stat answered %v, want a 'namespace unavailable' error", active, err)
		}
	}
	h := HA{Route: func() (xrootd.Namespace, string, error) { return nil, "host:1094", nil }}
	_, err := h.Stat(context.Background(), xrootd.Identity{}, "/f")
	var re *xrootd.RedirectError
	if !errors.As(err, &re) || re.Host != "host" || re.Port != 1094 {
		t.Errorf("a standby redirects to the active server: got %v", err)
	}
}
