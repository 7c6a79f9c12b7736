package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestGoFlagSpellings: the spellings of Go's flag package, which kaon
// parsed with before cobra, still parse: -name and -name=value of long
// flags, --x of one-letter ones; values and what follows "--" are left
// alone.
func TestGoFlagSpellings(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"up", "-data", "/d", "-http", "127.0.0.1:0", "-xrootd=", "-sync=false", "-v"},
			[]string{"up", "--data", "/d", "--http", "127.0.0.1:0", "--xrootd=", "--sync=false", "-v"}},
		{[]string{"fs", "add", "-node", "n1", "-path", "/p", "-url", "http://h:8000"},
			[]string{"fs", "add", "--node", "n1", "--path", "/p", "--url", "http://h:8000"}},
		{[]string{"ls", "-l", "/d"}, []string{"ls", "-l", "/d"}},
		{[]string{"quota", "set", "-path", "/q", "-u", "1001", "-bytes", "1G"},
			[]string{"quota", "set", "--path", "/q", "-u", "1001", "--bytes", "1G"}},
		// A flag's value is a value, whatever it looks like.
		{[]string{"token", "issue", "--path", "-data", "-scope", "read"}, []string{"token", "issue", "--path", "-data", "--scope", "read"}},
		{[]string{"ls", "--", "-data"}, []string{"ls", "--", "-data"}},
		{[]string{"-version"}, []string{"--version"}},
		{[]string{"fs", "ls", "-help"}, []string{"fs", "ls", "--help"}},
		// Not a flag of the command: left for cobra to refuse.
		{[]string{"ls", "-bogus", "/"}, []string{"ls", "-bogus", "/"}},
	} {
		if got := normalizeArgs(newRoot(), c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("normalizeArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, line := range [][]string{
		{"up", "-data", "/d", "-fs", "2", "-sync=false", "-v", "-cap-ttl", "1m"},
		{"mgm", "-meta", "etcd://h:1,h:2,h:3", "-meta-lease", "3s", "--v"},
		{"fst", "-mgm", "http://h:8000", "-key", "/k", "-fs", "/a", "-fs", "/b"},
		{"cfsd", "mount", "-backend", "/b", "-f", "-acl=false", "/m"},
		{"metafs", "index", "/t", "-o", "/t.idx", "-workers", "4"},
		{"mkdir", "-p", "/a/b"}, {"rm", "-r", "/a"}, {"mv", "-f", "/a", "/b"},
	} {
		if _, err := parse(line); err != nil {
			t.Errorf("kaon %s: %v", strings.Join(line, " "), err)
		}
	}
}

// TestConfigFileUnderCommandLine: a role's --config file is applied
// first and the command line over it; repeatable flags of both add up,
// as before cobra; a key that is no flag of the role is refused by name.
func TestConfigFileUnderCommandLine(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "kaon.toml")
	os.WriteFile(conf, []byte("fs = [\"/a\"]\nhttp = \"127.0.0.1:1\"\nio-timeout = \"7s\"\nv = true\n"), 0o644)
	cmd, err := parse([]string{"fst", "--config", conf, "--fs", "/b", "-http", "127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := cmd.Flags().GetStringArray("fs")
	http, _ := cmd.Flags().GetString("http")
	ioTO, _ := cmd.Flags().GetDuration("io-timeout")
	v, _ := cmd.Flags().GetBool("v")
	if !reflect.DeepEqual(fs, []string{"/a", "/b"}) || http != "127.0.0.1:2" || ioTO.String() != "7s" || !v {
		t.Fatalf("fst --config (fs /a, http :1, io-timeout 7s, v) --fs /b --http :2: fs %q http %s io-timeout %v v %v", fs, http, ioTO, v)
	}
	os.WriteFile(conf, []byte("no-such-setting = 1\n"), 0o644)
	var errs strings.Builder
	if code := execute([]string{"mgm", "--config=" + conf}, io.Discard, &errs); code != 2 || !strings.Contains(errs.String(), `"no-such-setting" is not a setting of kaon mgm`) {
		t.Fatalf("kaon mgm with an unknown setting: exit %d: %s", code, errs.String())
	}
}

// TestMisuseExits2: a command line that names no command, an unknown
// subverb, an unknown flag or a verb of subverbs without one exits 2 with
// a message on stderr; help and the version exit 0.
func TestMisuseExits2(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{nil, 2, "Usage:"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"fs"}, 2, "Usage:"},
		{[]string{"fs", "bogus"}, 2, `kaon fs: unknown subcommand "bogus"`},
		{[]string{"ls", "--bogus", "/"}, 2, "unknown flag: --bogus"},
		{[]string{"fsck", "report", "--scrub"}, 2, "unknown flag: --scrub"},
		{[]string{"help"}, 0, ""},
		{[]string{"fs", "help"}, 0, ""},
		{[]string{"--version"}, 0, ""},
		{[]string{"completion", "bash"}, 0, ""},
	} {
		var out, errs strings.Builder
		if code := execute(c.args, &out, &errs); code != c.code || !strings.Contains(errs.String(), c.err) {
			t.Errorf("kaon %s: exit %d (want %d), stderr %q (want %q)", strings.Join(c.args, " "), code, c.code, errs.String(), c.err)
		}
	}
}

// TestVersionStamped: the version and commit stamped with -ldflags -X
// are what kaon version and kaon --version print, in kaon version's
// format.
func TestVersionStamped(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v9.8.7", "0123abcd"
	var out strings.Builder
	if code := execute([]string{"--version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "kaon v9.8.7 0123abcd go") {
		t.Fatalf("kaon --version: exit %d %q", code, out.String())
	}
	if got := versionLine(); !strings.HasPrefix(got, "kaon v9.8.7 0123abcd go") {
		t.Fatalf("kaon version's first line: %q", got)
	}
}

// TestManPages: the hidden gen-man writes a page for kaon and every
// command, nothing for hidden ones.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if code := execute([]string{"gen-man", dir}, io.Discard, os.Stderr); code != 0 {
		t.Fatalf("kaon gen-man: exit %d", code)
	}
	for _, p := range []string{"kaon.1", "kaon-up.1", "kaon-fs-add.1", "kaon-completion-bash.1"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || !strings.Contains(string(b), ".TH") {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kaon-metafs-keeper.1")); err == nil {
		t.Error("a man page for the hidden metafs keeper")
	}
}

// TestExampleConfigs: the example configuration of each role that the
// package installs (deploy/config) sets only settings of that role.
func TestExampleConfigs(t *testing.T) {
	for _, role := range []string{"up", "mgm", "fst"} {
		conf := filepath.Join("..", "..", "deploy", "config", role+".toml")
		cmd, err := parse([]string{role, "--config", conf})
		if err != nil {
			t.Fatalf("kaon %s --config %s: %v", role, conf, err)
		}
		if data, _ := cmd.Flags().GetString("data"); !strings.HasPrefix(data, "/var/lib/kaon/") {
			t.Errorf("%s: data %q, want it under the units' StateDirectory /var/lib/kaon", conf, data)
		}
	}
}

// TestMountServers: --url (or mount(8)'s source) names one server or
// several, comma-separated, in order; the first one's path is the
// subtree; -o gateway= names the gateway key.
func TestMountServers(t *testing.T) {
	for _, c := range []struct {
		spec    string
		servers []string
		sub     string
		err     string
	}{
		{"http://a:1", []string{"http://a:1"}, "", ""},
		{"http://a:1/data/", []string{"http://a:1"}, "/data", ""},
		{"https://a:1,https://b:2", []string{"https://a:1", "https://b:2"}, "", ""},
		{"http://a:1/d, http://b:2/d", []string{"http://a:1", "http://b:2"}, "/d", ""},
		{"http://a:1/d,http://b:2/e", nil, "", "names subtree /e"},
		{"http://a:1,b:2", nil, "", `"b:2" is not a namespace server URL`},
		{",", nil, "", "no namespace server URL"},
	} {
		servers, sub, err := mountServers(c.spec)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error with %q", c.spec, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(servers, c.servers) || sub != c.sub {
			t.Errorf("%q: %q %q %v, want %q %q", c.spec, servers, sub, err, c.servers, c.sub)
		}
	}
	o := mountOptions{direct: "auto", options: []string{"_netdev", "gateway=/etc/kaon/gateway.key"}}
	if err := o.parseOptions(); err != nil || o.gateway != "/etc/kaon/gateway.key" {
		t.Errorf("-o gateway=: %q %v", o.gateway, err)
	}
	args, err := mountHelperArgs([]string{"http://a:1,http://b:2", "/mnt", "-o", "rw,gateway=/k"})
	if want := []string{"mount", "--url", "http://a:1,http://b:2", "-o", "rw,gateway=/k", "--", "/mnt"}; err != nil || !reflect.DeepEqual(args, want) {
		t.Errorf("mount.kaon: %q %v, want %q", args, err, want)
	}
}
