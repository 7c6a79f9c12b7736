package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// notCommands are documented kaon command lines that are not commands of
// this binary, and why.
var notCommands = map[string]string{
	"mount":              "DESIGN.md: the caching mount of the namespace, still to come",
	"token issue --data": "DESIGN-NOTES.md: the offline issuer that was the rejected alternative",
}

// TestDocumentedCommandsParse: every kaon command line of README.md,
// docs/*.md and the scripts (bench/, scripts/) names a command of the tree
// and parses: its verb and subverb exist and it gives no flag the
// command does not have (positional arguments are the commands' own
// business at run time).
func TestDocumentedCommandsParse(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	for _, pat := range []string{"docs/*.md", "scripts/*.sh", "bench/*.sh", "bench/*/*.sh"} {
		m, _ := filepath.Glob(filepath.Join(root, pat))
		files = append(files, m...)
	}
	var n int
	used := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range kaonCommands(string(b), strings.HasSuffix(f, ".md")) {
			n++
			joined := strings.Join(line, " ")
			if skip(joined) {
				continue
			}
			cmd, err := parse(sampleValues(line))
			if err != nil {
				t.Errorf("%s: kaon %s: %v", f, joined, err)
				continue
			}
			if cmd == cmd.Root() {
				t.Errorf("%s: kaon %s: names no command", f, joined)
				continue
			}
			used[cmd.CommandPath()] = true
		}
	}
	// The extraction itself works: the docs have well over a hundred.
	if n < 150 || len(used) < 40 {
		t.Fatalf("found %d documented kaon command lines naming %d commands: the extraction broke", n, len(used))
	}
	t.Logf("%d documented kaon command lines parse, naming %d commands", n, len(used))
}

// sampleValues replaces shell expansions given as the values of typed
// flags ("--streams $N") by a value of the flag's type.
func sampleValues(args []string) []string {
	cmd, _, err := newRoot().Find(args)
	if err != nil {
		return args
	}
	out := append([]string(nil), args...)
	for i := 1; i < len(out); i++ {
		if !strings.Contains(out[i], "$") || !strings.HasPrefix(out[i-1], "-") {
			continue
		}
		f := cmd.Flags().Lookup(strings.TrimLeft(out[i-1], "-"))
		if f == nil {
			continue
		}
		switch f.Value.Type() {
		case "int", "int64", "uint", "float64":
			out[i] = "1"
		case "duration":
			out[i] = "1s"
		}
	}
	return out
}

func skip(joined string) bool {
	for prefix := range notCommands {
		if joined == prefix || strings.HasPrefix(joined, prefix+" ") {
			return true
		}
	}
	return false
}

var (
	inlineCode = regexp.MustCompile("`([^`]+)`")
	verbWord   = regexp.MustCompile(`^[a-z][a-z-]*$`)
	assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	// wrappers run the command that follows them.
	wrappers = map[string]bool{"sudo": true, "time": true, "exec": true, "env": true, "nohup": true, "run_measured": true}
)

// kaonCommands are the kaon command lines of a document: in Markdown the
// lines of code blocks and the inline code spans, in a script every line;
// shell comments, redirections and the usage notation's brackets and
// ellipses are left out. Each is the arguments after the binary.
func kaonCommands(text string, markdown bool) [][]string {
	var snippets []string
	lines := strings.Split(text, "\n")
	inCode := !markdown
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if markdown && strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if !inCode {
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				snippets = append(snippets, m[1])
			}
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + lines[i]
		}
		snippets = append(snippets, line)
	}
	var out [][]string
	for _, s := range snippets {
		for _, seg := range shellSegments(s) {
			i := 0
			for i < len(seg) && (wrappers[seg[i]] || assignment.MatchString(seg[i])) {
				i++
			}
			if i+1 < len(seg) && isKaon(seg[i]) && verbWord.MatchString(seg[i+1]) {
				out = append(out, usageArgs(seg[i+1:]))
			}
		}
	}
	return out
}

// isKaon says whether a word runs the kaon binary.
func isKaon(w string) bool {
	switch w {
	case "kaon", "$kaon", "$KAON", "${KAON}", "$K", "$KAON_BIN":
		return true
	}
	return strings.HasSuffix(w, "/kaon")
}

// usageArgs drops the usage notation: [optional] and (alternative)
// brackets, "...", "|".
func usageArgs(words []string) []string {
	var out []string
	for _, w := range words {
		t := strings.Trim(w, "[]()")
		if t == "" && w != "" || t == "..." || t == "|" {
			continue // an empty word ("") stays: it is a value
		}
		out = append(out, t)
	}
	return out
}

// shellSegments splits a shell line into simple commands (at ; & && ||
// | ( ) and backquotes), each a list of words without quotes (a command
// substitution is one word); a comment ends the line and a redirection
// and its target are dropped.
func shellSegments(line string) [][]string {
	var segs [][]string
	var seg []string
	var word strings.Builder
	inWord, redirect := false, false
	endWord := func() {
		if inWord {
			if !redirect {
				seg = append(seg, word.String())
			}
			redirect = false
		}
		word.Reset()
		inWord = false
	}
	endSeg := func() {
		endWord()
		if len(seg) > 0 {
			segs = append(segs, seg)
		}
		seg = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '\\' && i+1 < len(line):
			i++
			word.WriteByte(line[i])
			inWord = true
		case c == '#' && !inWord:
			endSeg()
			return segs
		case c == ' ' || c == '\t':
			endWord()
		case c == ';' || c == '&' || c == '|' || c == '(' || c == ')' || c == '`':
			endSeg()
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			// A command substitution is a word (a flag's value, say).
			depth, j := 0, i+1
			for ; j < len(line); j++ {
				if line[j] == '(' {
					depth++
				} else if line[j] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			word.WriteString(line[i:min(j+1, len(line))])
			inWord = true
			i = j
		case c == '>' || c == '<':
			if w := word.String(); inWord && strings.Trim(w, "0123456789") == "" {
				word.Reset() // the descriptor of 2>
				inWord = false
			} else {
				endWord()
			}
			for i+1 < len(line) && (line[i+1] == '>' || line[i+1] == '&') {
				i++
			}
			redirect = true
			for i+1 < len(line) && line[i+1] == ' ' {
				i++
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	endSeg()
	return segs
}

// TestEveryCommandHasHelp: kaon VERB [SUBVERB] --help and kaon help VERB
// succeed for every command of the tree, printing its usage.
func TestEveryCommandHasHelp(t *testing.T) {
	var paths [][]string
	for _, c := range allCommands(newRoot()) {
		path := strings.Fields(strings.TrimPrefix(c.CommandPath(), "kaon"))
		paths = append(paths, path)
	}
	if len(paths) < 60 {
		t.Fatalf("only %d commands in the tree", len(paths))
	}
	for _, p := range paths {
		var out strings.Builder
		if code := execute(append(append([]string{}, p...), "--help"), &out, io.Discard); code != 0 || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("kaon %s --help: exit %d\n%s", strings.Join(p, " "), code, out.String())
		}
		if len(p) == 1 {
			out.Reset()
			if code := execute([]string{"help", p[0]}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), "Usage:") {
				t.Errorf("kaon help %s: exit %d\n%s", p[0], code, out.String())
			}
		}
	}
}

// allCommands are the commands below c, depth first.
func allCommands(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, s := range c.Commands() {
		out = append(out, s)
		out = append(out, allCommands(s)...)
	}
	return out
}
