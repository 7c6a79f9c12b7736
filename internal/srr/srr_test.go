package srr

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestBuildValidates: the document has a share per space and per project
// quota node with their bytes, validates, and the validator catches a
// missing required field or a negative size.
func TestBuildValidates(t *testing.T) {
	now := time.Unix(1_790_000_000, 0)
	d := Build(Input{Name: "kaon.example.org", Now: now,
		Endpoints: []Endpoint{{Name: "https", InterfaceType: "https", InterfaceVersion: "1.1", EndpointURL: "https://kaon.example.org:8000"}},
		Spaces:    []nsapi.Space{{Name: "default", Capacity: 1000, Used: 300}},
		Quotas: []nsapi.Quota{{Path: "/atlas", Kind: nsapi.QuotaProject, LimitBytes: 500, UsedBytes: 20},
			{Path: "/atlas", Kind: nsapi.QuotaUser, ID: 1001, LimitBytes: 5}}})
	b, _ := json.Marshal(d)
	if err := Validate(b); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	sh := d.StorageService.Shares
	if len(sh) != 2 || sh[0].TotalSize != 1000 || sh[0].UsedSize != 300 || sh[1].Path[0] != "/atlas" || sh[1].TotalSize != 500 || sh[1].UsedSize != 20 || sh[1].Timestamp != now.Unix() {
		t.Fatalf("shares: %+v", sh)
	}
	for _, bad := range []string{
		strings.Replace(string(b), `"implementation":`, `"implementationX":`, 1),
		strings.Replace(string(b), `"usedsize":300`, `"usedsize":-1`, 1),
		strings.Replace(string(b), `"endpointurl":`, `"url":`, 1),
		`{"storageservice":null}`,
	} {
		if err := Validate([]byte(bad)); err == nil {
			t.Errorf("validated a broken document: %s", bad)
		}
	}
}
