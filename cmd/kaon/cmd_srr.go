package main

import (
	"encoding/json"
	"os"

	"github.com/spf13/cobra"
)

func init() {
	addVerb(func() *cobra.Command {
		return withURL(leaf("srr", "the WLCG Storage Resource Report (JSON: the service, its endpoints, a share per space and per project quota node)", func(c *cobra.Command, _ []string) int {
			doc, err := newAPI(urlOf(c)).StorageReport(ctx())
			if err != nil {
				return fail("srr", err)
			}
			e := json.NewEncoder(os.Stdout)
			e.SetIndent("", "  ")
			_ = e.Encode(doc)
			return 0
		}))
	})
}
