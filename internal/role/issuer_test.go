package role

import (
	"strings"
	"testing"
)

// TestIssuerNeedsIdentity: an issuer that names no local user (user= or
// map=) is refused at start-up instead of quietly acting as nobody; authz=
// picks the strategy and takes only its two values.
func TestIssuerNeedsIdentity(t *testing.T) {
	dir := t.TempDir()
	for spec, want := range map[string]string{
		"https://iss.test=/nonexistent.jwks":                          "would act as nobody",
		"https://iss.test=/nonexistent.jwks,authz=capability":         "would act as nobody",
		"https://iss.test=/nonexistent.jwks,user=4242,authz=anything": "authz=",
	} {
		if _, _, err := parseIssuer(spec, dir, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error saying %q", spec, err, want)
		}
	}
	ic, _, err := parseIssuer("https://iss.test=https://iss.test/jwks,user=4242,authz=capability", dir, nil)
	if err != nil || !ic.Capability || ic.Map.User != "4242" {
		t.Fatalf("capability issuer: %+v, %v", ic, err)
	}
	ic, _, err = parseIssuer("https://iss.test=https://iss.test/jwks,user=4242", dir, nil)
	if err != nil || ic.Capability {
		t.Fatalf("default strategy is the mapped user's: %+v, %v", ic, err)
	}
}
