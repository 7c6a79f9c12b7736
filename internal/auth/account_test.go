package auth

import (
	"strings"
	"testing"
)

// TestLocalAccount: an account is its uid, gid and groups under the
// method that authenticated it; root and unknown names are refused, also
// when the lookup comes from the cache.
func TestLocalAccount(t *testing.T) {
	for i := 0; i < 2; i++ { // the second round is served from the cache
		p, err := LocalAccount("daemon", "krb5", "a ticket")
		if err != nil || p.Name != "daemon" || p.UID != 1 || p.Method != "krb5" {
			t.Fatalf("daemon: %+v %v", p, err)
		}
		p.Groups = append(p.Groups[:0], 4242) // a caller's change does not reach the cache
		if q, _ := LocalAccount("daemon", "x509", "a certificate"); q.Method != "x509" || len(q.Groups) > 0 && q.Groups[0] == 4242 {
			t.Fatalf("daemon as x509: %+v", q)
		}
		if _, err := LocalAccount("root", "krb5", "a ticket"); err == nil || !strings.Contains(err.Error(), "a ticket never maps to the superuser") {
			t.Fatalf("root: %v", err)
		}
		if _, err := LocalAccount("no-such-kaon-user", "krb5", "a ticket"); err == nil || err.Error() != "no such local user" {
			t.Fatalf("unknown user: %v", err)
		}
	}
}
