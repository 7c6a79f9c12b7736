// Command kaon is the single Kaon binary: every role (namespace server,
// storage server, FUSE mounts) and the operator/user CLI are subcommands,
// on github.com/spf13/cobra (help, completion and man pages from one
// command tree).
//
// Adding a verb: one file cmd_VERB.go whose init registers a constructor
// (the tree is built afresh for every run, so flag values never leak
// between runs in tests):
//
//	func init() { addVerb(newFrobCmd) }
//
//	func newFrobCmd() *cobra.Command {
//		var n int
//		c := leaf("frob PATH", "frob a file", func(c *cobra.Command, args []string) int {
//			if len(args) != 1 {
//				return usageError(c) // exit 2: misuse
//			}
//			if err := newAPI(urlOf(c)).Frob(ctx(), args[0], n); err != nil {
//				return fail("frob", err) // exit 1: "kaon frob: ..."
//			}
//			return 0
//		})
//		c.Flags().IntVarP(&n, "n", "n", 1, "how many times") // one letter: -n
//		return withURL(c) // --url, as every client verb has
//	}
//
// A verb with subverbs is group("frob", "short help", sub1, sub2, ...),
// each sub a leaf. Run functions return the exit code (0 ok, 1 failed, 2
// misuse); flags are long (--name), one-letter flags also -x, and
// settings a server role shares are bound by the one bind* function of
// their struct (config.go). Go-flag spellings of older scripts keep
// working: -name and -name=value are read as --name (normalizeArgs).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

// verbs are the constructors of the top-level commands (addVerb).
var verbs []func() *cobra.Command

// addVerb registers a top-level command; each cmd_*.go calls it from init.
func addVerb(f func() *cobra.Command) { verbs = append(verbs, f) }

// exitCode is a command's exit status other than 0; what went wrong was
// printed already.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// leaf is a command that runs: use is its name and arguments as help
// shows them ("ls [-l] PATH"), run returns the exit code.
func leaf(use, short string, run func(c *cobra.Command, args []string) int) *cobra.Command {
	return &cobra.Command{Use: use, Short: short,
		RunE: func(c *cobra.Command, args []string) error {
			if code := run(c, args); code != 0 {
				return exitCode(code)
			}
			return nil
		}}
}

// group is a verb of subverbs. Run without one (or with an unknown one)
// it prints its usage on stderr and exits 2; "kaon VERB help" is its
// help.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short,
		RunE: func(c *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
			case args[0] == "help":
				return c.Help()
			default:
				fmt.Fprintf(c.ErrOrStderr(), "kaon %s: unknown subcommand %q\n", c.Name(), args[0])
			}
			return usageExit(c)
		}}
	c.AddCommand(subs...)
	return c
}

// usageError prints c's usage on stderr and returns the misuse exit code.
func usageError(c *cobra.Command) int {
	c.PrintErr(c.UsageString())
	return 2
}

func usageExit(c *cobra.Command) error { return exitCode(usageError(c)) }

// newRoot builds the command tree.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "kaon",
		Short: "Kaon: a storage system for scientific data",
		Long: `Kaon: a storage system for scientific data. One binary: the server roles
(kaon up, mgm, fst), the FUSE mounts (cfsd, metafs) and the operator and
user CLI, which finds its namespace server through --url, $KAON_URL or the
local all-in-one's DATA/endpoints.json.`,
		Version:       versionLine(),
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(c *cobra.Command, args []string) error {
			return usageExit(c)
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	for _, f := range verbs {
		root.AddCommand(f())
	}
	// Added now (cobra would add them when it runs) so that prepare finds
	// them: kaon help [VERB], kaon completion bash|zsh|fish|powershell.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.AddCommand(&cobra.Command{Use: "gen-man DIR", Short: "write the man pages of every command to DIR", Hidden: true,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			return doc.GenManTree(root, &doc.GenManHeader{Title: "KAON", Section: "1", Source: "Kaon " + versionString()}, args[0])
		}})
	return root
}

func main() {
	if filepath.Base(os.Args[0]) == "mount.kaon" { // mount(8)'s helper
		args, err := mountHelperArgs(os.Args[1:])
		if err != nil {
			fmt.Fprintf(os.Stderr, "mount.kaon: %v\n", err)
			os.Exit(1)
		}
		if args == nil {
			os.Exit(0) // -f: a fake mount
		}
		// The daemon re-executes the binary with os.Args[1:].
		os.Args = append(os.Args[:1:1], args...)
	}
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the command line args and returns the exit status.
func execute(args []string, stdout, stderr io.Writer) int {
	root, cmd, args, err := prepare(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err != nil {
		return misuse(stderr, cmd, err)
	}
	root.SetArgs(args)
	cmd, err = root.ExecuteC()
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	return misuse(stderr, cmd, err)
}

// misuse reports a command line that does not parse (exit 2).
func misuse(stderr io.Writer, cmd *cobra.Command, err error) int {
	path := "kaon"
	if cmd != nil {
		path = cmd.CommandPath()
	}
	fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", path, err, path)
	return 2
}

// prepare builds the tree, normalizes args for the command they name
// (nil if none) and, for a server role, applies its --config file (the
// command line is parsed over it).
func prepare(args []string) (root, cmd *cobra.Command, _ []string, err error) {
	if args == nil {
		args = []string{} // not nil: cobra would read os.Args
	}
	root = newRoot()
	args = normalizeArgs(root, args)
	cmd, _, err = root.Find(args)
	if err != nil {
		// Not a command of the tree (an unknown verb, or cobra's hidden
		// __complete the shells' completion calls): cobra reports it.
		return root, nil, args, nil
	}
	if cmd.Flags().Lookup("config") != nil {
		if file := configArg(args); file != "" {
			if err := applyConfigFile(cmd.Flags(), cmd.CommandPath(), file); err != nil {
				return root, cmd, args, err
			}
		}
	}
	return root, cmd, args, nil
}

// parse resolves a command line to its command and parses its flags, as
// execute does, without running it; a group given an unknown subverb is
// an error. The docs test checks every documented command line with it.
func parse(args []string) (*cobra.Command, error) {
	root, cmd, args, err := prepare(args)
	if err != nil {
		return cmd, err
	}
	cmd, rest, err := root.Find(args)
	if err != nil {
		return cmd, err
	}
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		return cmd, err
	}
	if cmd.HasSubCommands() && cmd.Flags().NArg() > 0 && cmd.Flags().Arg(0) != "help" {
		return cmd, fmt.Errorf("unknown subcommand %q", cmd.Flags().Arg(0))
	}
	return cmd, nil
}

// normalizeArgs rewrites the Go flag package's spellings, which kaon
// took before it moved to cobra and which scripts may use, into pflag's:
// -name and -name=value of a long flag of the command become --name and
// --name=value. One-letter flags are pflag shorthands already (-l), and
// arguments after "--" or taken as a flag's value are left alone.
func normalizeArgs(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil {
		return args
	}
	lookup := func(name string) *pflag.Flag {
		if name == "help" || (name == "version" && cmd == root) {
			return &pflag.Flag{Name: name, NoOptDefVal: "true"}
		}
		if f := cmd.Flags().Lookup(name); f != nil {
			return f
		}
		return cmd.InheritedFlags().Lookup(name)
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		var f *pflag.Flag
		switch name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "="); {
		case strings.HasPrefix(a, "--"):
			if f = lookup(name); f != nil && hasValue {
				f = nil
			}
		case len(name) > 1:
			if f = lookup(name); f != nil {
				out[len(out)-1] = "-" + a
			}
			if hasValue {
				f = nil
			}
		default: // a shorthand
			if f = cmd.Flags().ShorthandLookup(name); f != nil && hasValue {
				f = nil
			}
		}
		if f != nil && f.NoOptDefVal == "" && i+1 < len(args) {
			i++ // the flag's value, whatever it looks like
			out = append(out, args[i])
		}
	}
	return out
}

// configArg is the --config FILE of a role's command line ("" if none).
func configArg(args []string) string {
	var file string
	for i, a := range args {
		switch {
		case a == "--":
			return file
		case a == "--config" && i+1 < len(args):
			file = args[i+1]
		case strings.HasPrefix(a, "--config="):
			file = strings.TrimPrefix(a, "--config=")
		}
	}
	return file
}
