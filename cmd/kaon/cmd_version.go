package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/backend/rados"
	"github.com/kaon-storage/kaon/internal/role"
)

// The release version and commit, stamped at build time:
//
//	go build -ldflags "-X main.version=v0.4.0 -X main.commit=$(git rev-parse HEAD)" ./cmd/kaon
//
// Unstamped, they come from what the Go toolchain recorded (the module's
// version, the VCS revision when built in a checkout).
var version, commit string

func init() {
	role.Release = versionString()
	addVerb(func() *cobra.Command {
		return leaf("version", "version, build and compiled-in backends", func(*cobra.Command, []string) int {
			fmt.Println(versionLine())
			if rados.Available {
				fmt.Println("RADOS support: yes (built with -tags ceph)")
			} else {
				fmt.Println("RADOS support: no (build with -tags ceph and librados-dev for rados:// filesystems)")
			}
			return 0
		})
	})
}

// versionString is the release version and commit: "v0.4.0 COMMIT",
// "(devel)" when neither is known.
func versionString() string {
	v, rev := version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && rev == "" {
				rev = s.Value
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if rev != "" {
		v += " " + rev
	}
	return v
}

// versionLine is the first line of kaon version, and kaon --version:
// "kaon VERSION [COMMIT] GOVERSION OS/ARCH".
func versionLine() string {
	return fmt.Sprintf("kaon %s %s %s/%s", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
