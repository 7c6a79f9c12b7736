package frontendtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Issuer signs the tokens of the token scenarios (integration/tokentest).
type Issuer interface {
	Token(t testing.TB, scope string) string    // valid, for scope
	RSAToken(t testing.TB, scope string) string // valid, signed with RS256
	// Forged are tokens for scope the server must refuse, by what is
	// wrong with them.
	Forged(t testing.TB, scope string) map[string]string
}

// Tokens runs the bearer-token scenarios over every front end that
// carries tokens (drivers make a driver sending a token, or none for ""):
// scopes narrow what the mapped identity (uid 4242, owner of everything
// below /tok-<driver name>, as the issuer's tokens map) may do, whole path
// components only, create never overwrites or deletes, and forged or
// unusable tokens never read or write a byte. It returns every token it
// sent, for CheckNoTokens.
func Tokens(t *testing.T, a Admin, iss Issuer, drivers []func(tok string) Driver) []string {
	src := LocalDir(t)
	content, small := []byte("data below /tok/foo\n"), []byte("new content\n")
	local, local2 := filepath.Join(src, "content"), filepath.Join(src, "small")
	os.WriteFile(local, content, 0o644)
	os.WriteFile(local2, small, 0o644)
	var used []string // every token sent, for the log check
	for _, mk := range drivers {
		name := mk("").Name()
		t.Run(name, func(t *testing.T) {
			b := "/tok-" + name
			root := mk("")
			for _, d := range []string{b, b + "/foo", b + "/foobar", b + "/bar", b + "/up", b + "/rw"} {
				a.Mkdir(t, d)
				a.Chown(t, d, 4242, 4242)
			}
			for _, f := range []string{b + "/foo/data", b + "/foobar/secret", b + "/bar/x", b + "/up/existing", b + "/rw/old"} {
				if r := root.Do(t, false, "put", local, f); r.Outcome != OK {
					t.Fatalf("setup %s: %s", f, r.Detail)
				}
				a.Chown(t, f, 4242, 4242)
			}
			tok := func(scope string) Driver {
				raw := iss.Token(t, scope)
				used = append(used, raw)
				return mk(raw)
			}
			want := func(what string, r Result, outcome string) {
				t.Helper()
				if r.Outcome != outcome {
					t.Fatalf("%s: %s, want %s (%s)", what, r.Outcome, outcome, r.Detail)
				}
			}
			absent := func(what, p string) {
				t.Helper()
				if a.Exists(t, p) {
					t.Fatalf("%s: %s exists", what, p)
				}
			}
			unchanged := func(what, p string) {
				t.Helper()
				if r := root.Do(t, false, "read", p, "0", "-1"); !bytes.Equal(r.Data, content) {
					t.Fatalf("%s: %s now holds %q", what, p, r.Data)
				}
			}

			rd := tok("storage.read:" + b + "/foo")
			if r := rd.Do(t, false, "read", b+"/foo/data", "0", "-1"); r.Outcome != OK || !bytes.Equal(r.Data, content) {
				t.Fatalf("read with a read scope: %s %q (%s)", r.Outcome, r.Data, r.Detail)
			}
			want("stat with a read scope", rd.Do(t, false, "stat", b+"/foo/data"), OK)
			want("list with a read scope", rd.Do(t, false, "ls", b+"/foo"), OK)
			if r := rd.Do(t, false, "read", b+"/foobar/secret", "0", "-1"); r.Outcome != Permission || bytes.Contains(r.Data, content) {
				t.Fatalf("a /foo scope on /foobar: %s (%s)", r.Outcome, r.Detail)
			}
			// Kaon refuses paths with .. outright (400 / kXR_ArgInvalid)
			if r := rd.Do(t, false, "read", b+"/foo/../bar/x", "0", "-1"); r.Outcome == OK || bytes.Contains(r.Data, content) {
				t.Fatalf("a /foo scope on /foo/../bar: %s (%s)", r.Outcome, r.Detail)
			}
			want("PUT with a read scope", rd.Do(t, false, "put", local2, b+"/foo/new"), Permission)
			absent("PUT with a read scope", b+"/foo/new")
			want("DELETE with a read scope", rd.Do(t, false, "rm", b+"/foo/data"), Permission)
			want("MKCOL with a read scope", rd.Do(t, false, "mkdir", b+"/foo/d"), Permission)
			absent("MKCOL with a read scope", b+"/foo/d")
			want("MOVE with a read scope", rd.Do(t, false, "mv", b+"/foo/data", b+"/foo/moved"), Permission)
			unchanged("a read token's attempts", b+"/foo/data")

			cr := tok("storage.create:" + b + "/up")
			want("upload with a create scope", cr.Do(t, false, "put", local2, b+"/up/new"), OK)
			want("mkdir with a create scope", cr.Do(t, false, "mkdir", b+"/up/d"), OK)
			want("overwrite with a create scope", cr.Do(t, false, "put", local2, b+"/up/existing"), Permission)
			want("delete with a create scope", cr.Do(t, false, "rm", b+"/up/existing"), Permission)
			want("rename with a create scope", cr.Do(t, false, "mv", b+"/up/existing", b+"/up/moved"), Permission)
			want("read with a create scope", cr.Do(t, false, "read", b+"/up/existing", "0", "-1"), Permission)
			// storage.create may not change an existing file in place
			// either: no ranged PUT, no kXR_open_updt/apnd, no truncation
			// by path or by handle (the last three: drivers that have them)
			want("update with a create scope", cr.Do(t, false, "write", local2, b+"/up/existing", "2"), Permission)
			if name == "root" {
				want("append with a create scope", cr.Do(t, false, "append", local2, b+"/up/existing"), Permission)
				want("truncate with a create scope", cr.Do(t, false, "truncate", b+"/up/existing", "3"), Permission)
				want("truncate by handle with a create scope", cr.Do(t, false, "ftruncate", b+"/up/existing", "3"), Permission)
			}
			unchanged("a create token's attempts", b+"/up/existing")
			want("create outside its scope", cr.Do(t, false, "put", local2, b+"/rw/c"), Permission)

			md := tok("storage.modify:" + b + "/rw")
			want("upload with a modify scope", md.Do(t, false, "put", local2, b+"/rw/new"), OK)
			want("update with a modify scope", md.Do(t, false, "write", local2, b+"/rw/old", "2"), OK)
			model := append(append([]byte(nil), content[:2]...), small...)
			model = append(model, content[2+len(small):]...)
			if name == "root" {
				want("append with a modify scope", md.Do(t, false, "append", local2, b+"/rw/old"), OK)
				model = append(model, small...)
				want("truncate by handle with a modify scope", md.Do(t, false, "ftruncate", b+"/rw/old", strconv.Itoa(len(model)-1)), OK)
				want("truncate with a modify scope", md.Do(t, false, "truncate", b+"/rw/old", strconv.Itoa(len(model)-2)), OK)
				model = model[:len(model)-2]
			}
			if r := root.Do(t, false, "read", b+"/rw/old", "0", "-1"); !bytes.Equal(r.Data, model) {
				t.Fatalf("after changes with a modify scope: %q, want %q (%s)", r.Data, model, r.Detail)
			}
			want("overwrite with a modify scope", md.Do(t, false, "put", local2, b+"/rw/old"), OK)
			want("rename with a modify scope", md.Do(t, false, "mv", b+"/rw/old", b+"/rw/older"), OK)
			want("mkdir with a modify scope", md.Do(t, false, "mkdir", b+"/rw/d"), OK)
			want("delete with a modify scope", md.Do(t, false, "rm", b+"/rw/older"), OK)
			want("modify outside its scope", md.Do(t, false, "rm", b+"/foo/data"), Permission)

			raw := iss.RSAToken(t, "read:"+b+"/foo write:"+b+"/rw") // SciTokens 2.0 forms, RS256
			used = append(used, raw)
			sci := mk(raw)
			want("SciTokens read:", sci.Do(t, false, "read", b+"/foo/data", "0", "-1"), OK)
			want("SciTokens write:", sci.Do(t, false, "put", local2, b+"/rw/sci"), OK)
			want("SciTokens write: outside its path", sci.Do(t, false, "put", local2, b+"/foo/sci"), Permission)

			refused := Unauth
			if name != "http" {
				refused = Permission // kXR_NotAuthorized
			}
			for what, raw := range iss.Forged(t, "storage.modify:"+b) {
				used = append(used, raw)
				f := mk(raw)
				if r := f.Do(t, false, "read", b+"/foo/data", "0", "-1"); r.Outcome != refused || bytes.Contains(r.Data, content) {
					t.Fatalf("%s token reads: %s (%s)", what, r.Outcome, r.Detail)
				}
				target := b + "/rw/forged-" + strings.ReplaceAll(what, " ", "-")
				want(what+" token writes", f.Do(t, false, "put", local2, target), refused)
				absent(what+" token writes", target)
				want(what+" token deletes", f.Do(t, false, "rm", b+"/foo/data"), refused)
				want(what+" token mkdirs", f.Do(t, false, "mkdir", target+"-d"), refused)
				absent(what+" token mkdirs", target+"-d")
			}
			unchanged("forged tokens' attempts", b+"/foo/data")
		})
	}
	return used
}

// CheckNoTokens fails if any part of a token (its claims or signature)
// appears in any of the logs.
func CheckNoTokens(t *testing.T, tokens []string, logs map[string]string) {
	t.Helper()
	for _, tok := range tokens {
		parts := strings.Split(tok, ".")
		for _, part := range parts[1:] {
			if len(part) < 16 {
				continue
			}
			for name, l := range logs {
				if strings.Contains(l, part) {
					t.Fatalf("the %s holds a token", name)
				}
			}
		}
	}
}
