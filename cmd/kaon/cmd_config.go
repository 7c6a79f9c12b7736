package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() { addVerb(newConfigCmd) }

const configUsage = `usage: kaon config save NAME
       kaon config load NAME [--version N]   (default: the latest version)
       kaon config ls`

func newConfigCmd() *cobra.Command {
	save := leaf("save NAME", "save the runtime settings (spaces, groups, filesystems' settings, access rules, quotas) as the next version of NAME",
		func(c *cobra.Command, args []string) int {
			if len(args) != 1 {
				fmt.Fprintln(os.Stderr, configUsage)
				return 2
			}
			sc, err := newAPI(urlOf(c)).SaveConfig(ctx(), args[0])
			if err != nil {
				return fail("config save", err)
			}
			fmt.Printf("saved %s version %d: %s\n", sc.Name, sc.Version, holds(sc))
			return 0
		})
	var version uint64
	load := leaf("load NAME", "apply a saved configuration (its latest version, or --version N)", func(c *cobra.Command, args []string) int {
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, configUsage)
			return 2
		}
		l, err := newAPI(urlOf(c)).LoadConfig(ctx(), args[0], version)
		if err != nil {
			return fail("config load", err)
		}
		fmt.Printf("loaded %s version %d: %s\n", l.Name, l.Version, holds(l.SavedConfig))
		for _, s := range l.Skipped {
			fmt.Printf("  not applied: %s\n", s)
		}
		return 0
	})
	load.Flags().Uint64Var(&version, "version", 0, "the version to apply (kaon config ls; default: the latest)")
	ls := leaf("ls", "the saved configurations: name, version, when, by whom, what they hold", func(c *cobra.Command, args []string) int {
		if len(args) != 0 {
			fmt.Fprintln(os.Stderr, configUsage)
			return 2
		}
		cs, err := newAPI(urlOf(c)).SavedConfigs(ctx())
		if err != nil {
			return fail("config ls", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "name\tversion\tsaved\tby\tholds")
		for _, x := range cs {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", x.Name, x.Version, x.Saved.Local().Format(time.DateTime), x.By, holds(x))
		}
		tw.Flush()
		return 0
	})
	return group("config", "saved runtime settings: config save NAME | config load NAME | config ls",
		withURL(save), withURL(load), withURL(ls))
}

// holds says what a saved configuration holds.
func holds(x nsapi.SavedConfig) string {
	return fmt.Sprintf("%d spaces, %d groups, %d filesystems, %d access rules, %d quotas", x.Spaces, x.Groups, x.Filesystems, x.Rules, x.Quotas)
}
