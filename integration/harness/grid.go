package harness

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
	"github.com/kaon-storage/kaon/internal/tlsconf"
)

// GridSite is a site's X.509 set-up in a temporary directory: a local CA
// for the host certificate (its hash file also in the CA directory, so
// clients trust it), the grid CA in that directory, and a grid-mapfile
// mapping the given lines' DNs to local users. Tests that use it run kaon
// as root to map DNs to other users.
type GridSite struct {
	Dir, CADir, Gridmap string
	Local               *tlsconf.Local
}

// NewGridSite makes a GridSite trusting grid, its grid-mapfile holding
// gridmap (lines `"DN" user`).
func NewGridSite(t *testing.T, grid *x509test.Cred, gridmap string) GridSite {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("this test runs kaon as root and maps DNs to local users")
	}
	s := GridSite{Dir: t.TempDir()}
	var err error
	if s.Local, err = tlsconf.LocalCA(filepath.Join(s.Dir, "tls")); err != nil {
		t.Fatal(err)
	}
	s.CADir = filepath.Join(s.Dir, "certificates")
	if err := x509test.WriteCADir(s.CADir, grid); err != nil {
		t.Fatal(err)
	}
	h, err := tlsconf.SubjectHash(s.Local.Cert)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(s.Local.HashDir, h+".0"))
	if err == nil {
		err = os.WriteFile(filepath.Join(s.CADir, h+".0"), b, 0o644)
	}
	if err == nil {
		s.Gridmap = filepath.Join(s.Dir, "grid-mapfile")
		err = os.WriteFile(s.Gridmap, []byte(gridmap), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}
