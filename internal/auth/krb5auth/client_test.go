package krb5auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientFromEnv: no credential cache is no Kerberos (not an error);
// a cache of a kind gokrb5 cannot read, or one that is not a cache, is
// an error naming it. (A real cache from kinit: integration/krb5.)
func TestClientFromEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KRB5_CONFIG", filepath.Join(dir, "krb5.conf"))
	os.WriteFile(filepath.Join(dir, "krb5.conf"), []byte("[libdefaults]\n\tdefault_realm = KAON.TEST\n"), 0o644)
	for _, cc := range []string{filepath.Join(dir, "none"), "FILE:" + filepath.Join(dir, "none")} {
		t.Setenv("KRB5CCNAME", cc)
		if cl, ok, err := ClientFromEnv(); cl != nil || ok || err != nil {
			t.Fatalf("KRB5CCNAME=%s (absent): %v %v %v", cc, cl, ok, err)
		}
	}
	t.Setenv("KRB5CCNAME", "KEYRING:persistent:0")
	if _, ok, err := ClientFromEnv(); ok || err == nil || !strings.Contains(err.Error(), "KEYRING:persistent:0") {
		t.Fatalf("a keyring cache: %v %v", ok, err)
	}
	bad := filepath.Join(dir, "garbage")
	os.WriteFile(bad, []byte("not a credential cache"), 0o600)
	t.Setenv("KRB5CCNAME", bad)
	if _, ok, err := ClientFromEnv(); ok || err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("a file that is no cache: %v %v", ok, err)
	}
}
