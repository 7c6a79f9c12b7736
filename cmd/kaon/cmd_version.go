package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/kaon-storage/kaon/internal/backend/rados"
)

func init() {
	register(command{name: "version", short: "version, build and compiled-in backends", run: runVersion})
}

func runVersion([]string) int {
	version, rev := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = " " + s.Value
			}
		}
	}
	fmt.Printf("kaon %s%s %s %s/%s\n", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if rados.Available {
		fmt.Println("RADOS support: yes (built with -tags ceph)")
	} else {
		fmt.Println("RADOS support: no (build with -tags ceph and librados-dev for rados:// filesystems)")
	}
	return 0
}
