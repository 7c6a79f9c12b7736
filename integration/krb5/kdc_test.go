package krb5

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// kdc is a real MIT KDC (krb5kdc -n) serving the test's own realms on a
// loopback port, with its own krb5.conf, kdc.conf, databases and replay
// cache directory; nothing of the host's Kerberos configuration is read.
type kdc struct {
	t    *testing.T
	dir  string
	Conf string // krb5.conf clients use (KRB5_CONFIG)
	env  []string
}

// newKDC creates realms (the first is the default; every realm trusts
// the others' users: cross-realm krbtgt principals both ways) and starts
// the KDC.
func newKDC(t *testing.T, realms ...string) *kdc {
	t.Helper()
	for _, tool := range []string{"krb5kdc", "kdb5_util", "kadmin.local", "kinit"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: run scripts/deps.sh (krb5-kdc, krb5-admin-server, krb5-user)", tool)
		}
	}
	dir := t.TempDir()
	port := harness.FreePort(t)
	k := &kdc{t: t, dir: dir, Conf: filepath.Join(dir, "krb5.conf")}
	var client, server strings.Builder
	fmt.Fprintf(&client, "[libdefaults]\n\tdefault_realm = %s\n\tdns_lookup_kdc = false\n\tdns_lookup_realm = false\n"+
		"\tdns_canonicalize_hostname = false\n\trdns = false\n\tudp_preference_limit = 1\n[realms]\n", realms[0])
	fmt.Fprintf(&server, "[kdcdefaults]\n\tkdc_listen = 127.0.0.1:%d\n\tkdc_tcp_listen = 127.0.0.1:%d\n[realms]\n", port, port)
	for _, r := range realms {
		fmt.Fprintf(&client, "\t%s = {\n\t\tkdc = 127.0.0.1:%d\n\t}\n", r, port)
		fmt.Fprintf(&server, "\t%s = {\n\t\tdatabase_name = %s\n\t\tkey_stash_file = %s\n\t\tacl_file = %s\n\t}\n",
			r, filepath.Join(dir, r+".db"), filepath.Join(dir, r+".stash"), filepath.Join(dir, "kadm5.acl"))
	}
	fmt.Fprintf(&client, "[domain_realm]\n\tlocalhost = %s\n", realms[0])
	fmt.Fprintf(&server, "[logging]\n\tkdc = FILE:%s\n", filepath.Join(dir, "kdc.log"))
	os.WriteFile(k.Conf, []byte(client.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "kdc.conf"), []byte(server.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "kadm5.acl"), nil, 0o644)
	os.Mkdir(filepath.Join(dir, "rcache"), 0o700)
	k.env = append(os.Environ(), "KRB5_CONFIG="+k.Conf, "KRB5_KDC_PROFILE="+filepath.Join(dir, "kdc.conf"),
		"KRB5RCACHEDIR="+filepath.Join(dir, "rcache"), "KRB5CCNAME=FILE:"+filepath.Join(dir, "nocache"))
	for _, r := range realms {
		k.run("create realm "+r, "kdb5_util", "-r", r, "create", "-s", "-P", "master-"+r)
	}
	for _, a := range realms {
		for _, b := range realms {
			if a != b {
				for _, r := range []string{a, b} { // the same key in both databases
					k.admin(r, fmt.Sprintf("addprinc -pw cross-%s-%s krbtgt/%s@%s", a, b, a, b))
				}
			}
		}
	}
	args := []string{"-n"}
	for _, r := range realms {
		args = append(args, "-r", r)
	}
	cmd := exec.Command("krb5kdc", args...)
	cmd.Env = k.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "kdc.log"))
			t.Logf("kdc log:\n%s", b)
		}
	})
	harness.WaitFor(t, 30*time.Second, "krb5kdc listening on its port", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return k
}

func (k *kdc) run(step string, name string, args ...string) string {
	k.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = k.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		k.t.Fatalf("%s: %s %v: %v\n%s", step, name, args, err, out)
	}
	return string(out)
}

// admin runs one kadmin.local query in realm.
func (k *kdc) admin(realm, query string) {
	k.t.Helper()
	k.run(query, "kadmin.local", "-r", realm, "-q", query)
}

// keytab creates principals (random keys) and writes their keys to a
// keytab file (mode 0600) it returns.
func (k *kdc) keytab(realm, name string, principals ...string) string {
	k.t.Helper()
	path := filepath.Join(k.dir, name+".keytab")
	for _, p := range principals {
		k.admin(realm, "addprinc -randkey "+p)
		k.admin(realm, "ktadd -k "+path+" "+p)
	}
	return path
}

// kinit gets principal's TGT from its keytab into a cache of its own
// (lifetime "" for the default) and returns the cache's KRB5CCNAME.
func (k *kdc) kinit(principal, keytab, lifetime string) string {
	k.t.Helper()
	cc := "FILE:" + filepath.Join(k.dir, "cc-"+strings.NewReplacer("/", "_", "@", "_").Replace(principal)+lifetime)
	args := []string{"-c", cc, "-k", "-t", keytab}
	if lifetime != "" {
		args = append(args, "-l", lifetime)
	}
	k.run("kinit "+principal, "kinit", append(args, principal)...)
	return cc
}
