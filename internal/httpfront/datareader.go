package httpfront

import (
	"context"
	"io"
	"net/http"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsserver"
)

// DataReader reads a file through a storage server's data endpoint, as a
// client would (nsserver.DataReader: checksums computed on request).
type DataReader struct{ HTTP *http.Client }

// Read implements nsserver.DataReader.
func (d DataReader) Read(ctx context.Context, g *nsserver.Grant) (io.ReadCloser, error) {
	hc := d.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, dataURL(g), nil)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, "read", g.Cap.Path, err)
	}
	resp, err := hc.Do(req)
	if err != nil { // not wrapped: the error text holds the capability
		return nil, kerr.New(kerr.IO, "read", g.Cap.Path, "storage server unreachable")
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, kerr.New(kerr.IO, "read", g.Cap.Path, "storage server answered "+resp.Status)
	}
	return resp.Body, nil
}
