package cluster

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// secretWord is a camel-case word naming a secret, a MAC or a signature.
var secretWord = regexp.MustCompile(`^(secret|secrets|mac|hmac|sig|sigs|signature|password|passwd)$`)

// camelWords splits an identifier into lower-case words (wantMAC: want,
// mac; internalSecret: internal, secret).
func camelWords(id string) []string {
	var out []string
	start := 0
	for i := 1; i < len(id); i++ {
		lower, upper := id[i-1] >= 'a' && id[i-1] <= 'z', id[i] >= 'A' && id[i] <= 'Z'
		acronymEnd := i+1 < len(id) && id[i-1] >= 'A' && id[i-1] <= 'Z' && upper && id[i+1] >= 'a' && id[i+1] <= 'z'
		if (lower && upper) || acronymEnd || id[i] == '_' {
			out = append(out, strings.ToLower(strings.Trim(id[start:i], "_")))
			start = i
		}
	}
	return append(out, strings.ToLower(strings.Trim(id[start:], "_")))
}

// secretOperand says why e looks like a secret: an identifier or field
// named like one, or the Authorization header (which carries the
// internal secret).
func secretOperand(e ast.Expr) string {
	why := ""
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			for _, w := range camelWords(n.Name) {
				if secretWord.MatchString(w) {
					why = n.Name
				}
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Get" && len(n.Args) == 1 {
				if lit, ok := n.Args[0].(*ast.BasicLit); ok && strings.EqualFold(strings.Trim(lit.Value, `"`), "Authorization") {
					why = "the Authorization header"
				}
			}
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "len" {
				return false // a length is no secret
			}
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && (pkg.Name == "subtle" || pkg.Name == "hmac") {
					return false // the constant-time comparison itself
				}
			}
		}
		return why == ""
	})
	return why
}

// trivial is a comparison with nil, "" or 0, which leaks nothing.
func trivial(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "nil"
	case *ast.BasicLit:
		return e.Value == `""` || e.Value == "0"
	}
	return false
}

// TestSecretsComparedInConstantTime: no Go file of Kaon compares a
// secret, a MAC, a signature or the internal bearer with == or != (whose
// time depends on where the first difference is); such comparisons go
// through crypto/subtle or hmac.Equal.
func TestSecretsComparedInConstantTime(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			b, ok := n.(*ast.BinaryExpr)
			if !ok || (b.Op != token.EQL && b.Op != token.NEQ) || trivial(b.X) || trivial(b.Y) {
				return true
			}
			why := secretOperand(b.X)
			if why == "" {
				why = secretOperand(b.Y)
			}
			if why != "" {
				rel, _ := filepath.Rel(root, fset.Position(b.Pos()).Filename)
				t.Errorf("%s:%d: %s compared with %s: use subtle.ConstantTimeCompare or hmac.Equal", rel, fset.Position(b.Pos()).Line, why, b.Op)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("checked only %d Go files under %s: the walk missed the module", files, root)
	}
}

func TestCamelWords(t *testing.T) {
	for id, want := range map[string]string{"wantMAC": "want mac", "internalSecret": "internal secret", "HMACKey": "hmac key",
		"sig": "sig", "Signature": "signature", "design": "design", "macro": "macro"} {
		if got := strings.Join(camelWords(id), " "); got != want {
			t.Errorf("camelWords(%q) = %q, want %q", id, got, want)
		}
	}
}
