// Command kaon is the single Kaon binary: every role (namespace server,
// storage server, FUSE mounts) and the operator/user CLI are subcommands.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// command is one subcommand; each lives in its own cmd_*.go file and
// registers itself from init so the roles stay independent.
type command struct {
	name  string
	short string
	run   func(args []string) int
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kaon <command> [args]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].short)
	}
}

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		usage()
		os.Exit(2)
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "kaon: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	os.Exit(c.run(os.Args[2:]))
}
