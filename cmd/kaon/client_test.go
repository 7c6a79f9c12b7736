package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestBearerDiscovery: the token of the environment is found where WLCG
// Bearer Token Discovery says, in its order; a place unset, absent or
// empty passes to the next; the well-known files count only when this
// user owns them.
func TestBearerDiscovery(t *testing.T) {
	xdg, tmp, other := t.TempDir(), t.TempDir(), t.TempDir()
	old := btTmp
	btTmp = tmp
	t.Cleanup(func() { btTmp = old })
	name := "bt_u" + strconv.Itoa(os.Getuid())
	write := func(dir, f, tok string) string {
		p := filepath.Join(dir, f)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := write(other, "tok", "from-file")
	write(xdg, name, "from-xdg")
	write(tmp, name, "from-tmp")
	empty := write(other, "empty", "")
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BEARER_TOKEN": " from-env\n", "BEARER_TOKEN_FILE": file, "XDG_RUNTIME_DIR": xdg}, "from-env"},
		{map[string]string{"BEARER_TOKEN": "", "BEARER_TOKEN_FILE": file, "XDG_RUNTIME_DIR": xdg}, "from-file"},
		{map[string]string{"BEARER_TOKEN": "", "BEARER_TOKEN_FILE": empty, "XDG_RUNTIME_DIR": xdg}, "from-xdg"},
		{map[string]string{"BEARER_TOKEN": "", "BEARER_TOKEN_FILE": filepath.Join(other, "absent"), "XDG_RUNTIME_DIR": other}, "from-tmp"},
		{map[string]string{"BEARER_TOKEN": "", "BEARER_TOKEN_FILE": "", "XDG_RUNTIME_DIR": ""}, "from-tmp"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		if got := envBearer(); got != c.want {
			t.Errorf("with %v: token %q, want %q", c.env, got, c.want)
		}
	}
	if os.Getuid() == 0 {
		// Another user's file in /tmp is not this user's token.
		os.Chown(filepath.Join(tmp, name), 4242, 4242)
		t.Setenv("XDG_RUNTIME_DIR", "")
		if got := envBearer(); got != "" {
			t.Errorf("a token file another user owns was taken: %q", got)
		}
	}
}
