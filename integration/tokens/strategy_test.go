package tokens

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/integration/tokentest"
)

// TestIssuerStrategies: the same storage.create:/data token on a
// root-owned /data is refused under an issuer's default rule (the mapped
// user's mode bits decide, scopes only narrow) and allowed under
// ,authz=capability, where what it creates is owned by the mapped user;
// whoami says which rule applies.
func TestIssuerStrategies(t *testing.T) {
	src := t.TempDir()
	os.Chmod(src, 0o755)
	user := tokentest.New(t, src, "https://user.test", "https://kaon.test")
	capDir := filepath.Join(src, "cap")
	os.Mkdir(capDir, 0o755)
	capability := tokentest.New(t, capDir, "https://capability.test", "https://kaon.test")
	k := harness.Up(t, "--auth", "unix,token", "--token-audience", "https://kaon.test",
		"--token-issuer", user.URL+"="+user.JWKSFile+",user=4242",
		"--token-issuer", capability.URL+"="+capability.JWKSFile+",user=4242,authz=capability")
	k.MustKaon("mkdir", "/data")
	k.MustKaon("chmod", "755", "/data")
	local := filepath.Join(src, "f")
	os.WriteFile(local, []byte("capability\n"), 0o644)

	put := func(tok, name string) string {
		out, errs, code := run(t, nil, 0, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-T", local,
			"-H", "Authorization: Bearer "+tok, k.EP.HTTP+"/data/"+name)
		if code != 0 {
			t.Fatalf("curl PUT /data/%s: exit %d: %s", name, code, errs)
		}
		return out
	}
	userTok := user.Token(t, "storage.create:/data")
	capTok := capability.Token(t, "storage.create:/data")
	if got := put(userTok, "by-user"); got != "403" {
		t.Fatalf("PUT under the mapped-user rule into root-owned /data: HTTP %s, want 403", got)
	}
	if got := put(capTok, "by-capability"); got != "201" {
		t.Fatalf("PUT under the capability rule: HTTP %s, want 201", got)
	}
	if out := k.MustKaon("stat", "/data/by-capability"); !strings.Contains(out, "4242") {
		t.Fatalf("a file created under the capability rule is not owned by the mapped user 4242:\n%s", out)
	}
	if _, _, code := k.Kaon("stat", "/data/by-user"); code == 0 {
		t.Fatal("the refused PUT left /data/by-user behind")
	}
	// Scopes still bound a capability token: no create outside them, no
	// overwrite with create.
	if got := put(capability.Token(t, "storage.create:/elsewhere"), "outside"); got != "403" {
		t.Fatalf("PUT outside the capability token's scopes: HTTP %s, want 403", got)
	}
	if got := put(capTok, "by-capability"); got != "403" {
		t.Fatalf("overwrite with a storage.create capability token: HTTP %s, want 403", got)
	}

	for tok, want := range map[string]string{userTok: "authz=identity+scopes", capTok: "authz=capability"} {
		if w, errs, _ := kaonCLI(t, k, []string{"BEARER_TOKEN=" + tok}, 0, "whoami"); !strings.Contains(w, want) {
			t.Fatalf("whoami: want %s in %q (%s)", want, w, errs)
		}
	}
	noTokens(t, k, []string{userTok, capTok})
}
