package role

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/internal/xrdfront"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

func upConfig(dir string) UpConfig {
	return UpConfig{Listen: Listen{Data: dir, HTTP: "127.0.0.1:0", XRootD: "127.0.0.1:0"},
		Namespace: DefaultNamespace(), Storage: DefaultStorage(), Security: DefaultSecurity(), FS: 2}
}

// TestStartUp: the all-in-one serves a file through its endpoints, and
// after a restart on the same data directory (new ports) still serves it.
func TestStartUp(t *testing.T) {
	dir := t.TempDir()
	s, err := StartUp(upConfig(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := s.Endpoints
	if !strings.HasPrefix(ep.HTTP, "http://127.0.0.1:") || !strings.HasPrefix(ep.FSTHTTP, "http://127.0.0.1:") ||
		!strings.HasPrefix(ep.XRootD, "root://127.0.0.1:") || !strings.HasPrefix(ep.FSTXrd, "root://127.0.0.1:") {
		s.Close()
		t.Fatalf("endpoints %+v", ep)
	}
	data := []byte("kept across a restart\n")
	req, _ := http.NewRequest(http.MethodPut, ep.HTTP+"/f", bytes.NewReader(data))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		s.Close()
		t.Fatalf("PUT: %v %v", resp, err)
	}
	resp.Body.Close()
	s.Close()

	s, err = StartUp(upConfig(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err = http.Get(s.Endpoints.HTTP + "/f")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, data) {
		t.Fatalf("GET after restart: %d %q", resp.StatusCode, got)
	}
}

// TestStartUpRefusesBadAuth: settings the role cannot serve are refused
// before it serves, and what it opened is closed again (the store can be
// opened by the next start).
func TestStartUpRefusesBadAuth(t *testing.T) {
	dir := t.TempDir()
	c := upConfig(dir)
	c.Namespace.Auth.Methods = "kerberos"
	if _, err := StartUp(c, nil); err == nil || !strings.Contains(err.Error(), `unknown method "kerberos"`) {
		t.Fatalf("StartUp with --auth kerberos: %v", err)
	}
	s, err := StartUp(upConfig(dir), nil)
	if err != nil {
		t.Fatalf("StartUp after a refused start: %v", err)
	}
	s.Close()
}

// TestProtocolOrder: root://'s security protocols follow --auth's order
// (token is ztn); gsi needs --tls; data listeners offer none.
func TestProtocolOrder(t *testing.T) {
	dir := t.TempDir()
	gm := filepath.Join(dir, "grid-mapfile")
	os.WriteFile(gm, nil, 0o644)
	sc := SecurityConfig{TLS: true, TLSDir: filepath.Join(dir, "tls"), GridMap: gm}
	for methods, want := range map[string]string{"gsi,unix,token": "gsi,ztn", "token,gsi": "ztn,gsi", "unix": ""} {
		sec, err := sc.setup(dir, methods)
		if err != nil {
			t.Fatalf("%s: %v", methods, err)
		}
		cfg := xrootd.Config{Namespace: xrdfront.Namespace{}}
		sec.xrootd(&cfg, nil)
		var got []string
		for _, p := range cfg.Security {
			got = append(got, p.Name())
		}
		if strings.Join(got, ",") != want {
			t.Fatalf("--auth %s offers %v, want %s", methods, got, want)
		}
		data := xrootd.Config{}
		if sec.xrootd(&data, nil); len(data.Security) != 0 {
			t.Fatalf("--auth %s: a data listener offers %d protocols", methods, len(data.Security))
		}
	}
	if _, err := (SecurityConfig{GridMap: gm}).setup(dir, "gsi"); err == nil || !strings.Contains(err.Error(), "--auth gsi needs --tls") {
		t.Fatalf("gsi without --tls: %v", err)
	}
}
