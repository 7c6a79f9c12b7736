package mount_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"github.com/kaon-storage/kaon/integration/harness"
)

// TestDefaultCacheRemoved: a mount without --cache keeps its write-back
// journals in /var/cache/kaon/mount-ID (as root) and removes that
// directory when it ends — the journals are unlinked at creation, so it
// is empty then, and every mount point used once would otherwise leave
// one behind for good.
func TestDefaultCacheRemoved(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the default cache directory is /var/cache/kaon only for root")
	}
	up := harness.Up(t)
	up.MustKaon("mkdir", "/cache")
	d := fusetest.TempDir(t)
	mp := filepath.Join(d, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(mp))
	cache := filepath.Join("/var/cache/kaon", "mount-"+hex.EncodeToString(sum[:6]))
	m := &kmount{t: t, url: up.EP.HTTP, sub: "/cache", mp: mp}
	m.start()
	t.Cleanup(m.stop)
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("the mount's default cache directory: %v", err)
	}
	m.stop()
	if _, err := os.Stat(cache); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the mount ended (stat: %v)", cache, err)
	}
}
