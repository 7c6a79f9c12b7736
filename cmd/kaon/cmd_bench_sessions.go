package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/bench"
)

func newBenchSessionWireCmd() *cobra.Command {
	var cfg bench.WireConfig
	c := leaf("session-wire", "the session channel's candidate transports on one stream of invalidations: gRPC vs HTTP/2 (net/http), in process over loopback", func(*cobra.Command, []string) int {
		res, err := bench.SessionWire(cfg, os.Stdout)
		if err != nil {
			return fail("bench session-wire", err)
		}
		bench.PrintWire(os.Stdout, cfg, res)
		return 0
	})
	fl := c.Flags()
	fl.IntVar(&cfg.Events, "events", 200000, "invalidations pushed in one burst")
	fl.IntVar(&cfg.Trips, "trips", 20000, "request/reply round trips")
	fl.IntVar(&cfg.Idle, "idle", 2000, "idle streams opened to measure what one costs")
	fl.IntVar(&cfg.Rounds, "rounds", 3, "rounds of each transport, alternating")
	return c
}
