package tokens

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/srr"
)

// TestStorageResourceReport: the WLCG SRR document at
// /.well-known/srr.json (read with curl by a client without credentials,
// as accounting does, also from a token-only instance), at a path
// --srr-path moves it to, and from `kaon srr`, validates against the schema's required fields and reports
// the space and a project quota node with their bytes.
func TestStorageResourceReport(t *testing.T) {
	k := harness.Up(t, "--srr-path", "/info/srr.json")
	k.MustKaon("mkdir", "/atlas")
	k.MustKaon("quota", "set", "--path", "/atlas", "-p", "--bytes", "10G")
	mustRun(t, nil, "curl", "-sSf", "-L", "-T", "/etc/hostname", k.EP.HTTP+"/atlas/f")

	check := func(what, body string) srr.Document {
		t.Helper()
		if err := srr.Validate([]byte(body)); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, body)
		}
		var d srr.Document
		json.Unmarshal([]byte(body), &d)
		var space, quota *srr.Share
		for i, s := range d.StorageService.Shares {
			switch {
			case strings.HasPrefix(s.Name, "space:"):
				space = &d.StorageService.Shares[i]
			case s.Name == "quota:/atlas":
				quota = &d.StorageService.Shares[i]
			}
		}
		if space == nil || space.TotalSize <= 0 {
			t.Fatalf("%s: no space share with its capacity:\n%s", what, body)
		}
		if quota == nil || quota.TotalSize != 10<<30 || quota.UsedSize <= 0 || quota.Path[0] != "/atlas" {
			t.Fatalf("%s: no share of quota node /atlas with 10 GiB and its use:\n%s", what, body)
		}
		if len(d.StorageService.Endpoints) == 0 || d.StorageService.Endpoints[0].EndpointURL != k.EP.HTTP {
			t.Fatalf("%s: endpoint is not %s:\n%s", what, k.EP.HTTP, body)
		}
		return d
	}
	out, _, code := run(t, nil, 65534, "curl", "-sS", "-w", "\n%{http_code}", k.EP.HTTP+"/info/srr.json")
	i := strings.LastIndex(out, "\n")
	body, status := out[:i], out[i+1:]
	if code != 0 || status != "200" {
		t.Fatalf("GET /info/srr.json as nobody: %s %s", status, body)
	}
	check("GET --srr-path", body)
	if out, _, _ := run(t, nil, 0, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", k.EP.HTTP+"/.well-known/srr.json"); out != "404" {
		t.Fatalf("the default path still answers after --srr-path moved it: %s", out)
	}
	check("kaon srr", k.MustKaon("srr"))

	// Served without credentials at the default path even where no
	// anonymous client is admitted otherwise.
	d := harness.Up(t, "--auth", "token")
	out = mustRun(t, nil, "curl", "-sSf", d.EP.HTTP+srr.DefaultPath)
	if err := srr.Validate([]byte(out)); err != nil {
		t.Fatalf("GET %s: %v\n%s", srr.DefaultPath, err, out)
	}
}
