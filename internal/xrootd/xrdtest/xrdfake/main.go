// Command xrdfake runs the xrdtest manager+data pair for manual testing
// with real clients: xrdfake DIR prints "MANAGER DATA" addresses.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/xrdtest"
)

func main() {
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := xrdtest.Start(os.Args[1], xrootd.Config{Logger: lg})
	if err != nil {
		panic(err)
	}
	fmt.Println(c.MgrAddr, c.DataAddr)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt)
	<-ch
	c.Close()
}
