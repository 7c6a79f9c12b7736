package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/bench"
)

func newBenchSessionWireCmd() *cobra.Command {
	var cfg bench.WireConfig
	c := leaf("session-wire", "the session channel's candidate transports on one stream of invalidations: gRPC, HTTP/2 (net/http) and WebSocket (gorilla), in process over loopback", func(*cobra.Command, []string) int {
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

func newBenchSessionsCmd() *cobra.Command {
	var (
		data, plotFile string
		cfg            bench.SessionsConfig
	)
	c := leaf("sessions", "N client sessions (heartbeats, leases) against a running server: its CPU and RSS, and the time for a change to reach the sessions subscribed to its directory", func(*cobra.Command, []string) int {
		url, pid, err := serverOf(data)
		if err != nil {
			return fail("bench sessions", err)
		}
		cfg.URL, cfg.ServerPID = url, pid
		res, err := bench.Sessions(cfg, os.Stdout)
		if err != nil {
			return fail("bench sessions", err)
		}
		bench.PrintSessions(os.Stdout, cfg, res)
		if plotFile != "" {
			title := fmt.Sprintf("a creation reaching %d subscribers (%d sessions)", min(cfg.Audience, cfg.Sessions), cfg.Sessions)
			if err := bench.PlotLatency(plotFile, title, []bench.Series{{Name: "all pushed", Ds: res.Reach}, {Name: "suppression on", Ds: res.ReachSuppressed}}); err != nil {
				return fail("bench sessions", err)
			}
		}
		return 0
	})
	fl := c.Flags()
	fl.StringVar(&data, "data", defaultDataDir(), "data dir of the running server (endpoints.json)")
	fl.IntVar(&cfg.Sessions, "sessions", 10000, "sessions to open")
	fl.IntVar(&cfg.Leases, "leases-per-session", 10, "leases each session takes")
	fl.IntVar(&cfg.PerStream, "per-stream", 1000, "sessions sharing one stream")
	fl.BoolVar(&cfg.HTTP2, "http2", false, "streams as HTTP/2 POSTs (as clients before the WebSocket) instead of WebSockets (a connection each)")
	fl.IntVar(&cfg.Conns, "conns", 4, "HTTP/2 connections the streams are spread over (--http2)")
	fl.IntVar(&cfg.Dirs, "dirs", 1000, "directories the leases are spread over")
	fl.IntVar(&cfg.Audience, "audience", 1000, "sessions subscribed to the directory the timed changes are made in")
	fl.IntVar(&cfg.Changes, "changes", 20, "changes timed, with and without broadcast suppression")
	fl.DurationVar(&cfg.Settle, "settle", 30*time.Second, "how long the server's CPU is measured while the sessions only heartbeat")
	fl.StringVar(&plotFile, "plot", "", "draw the distributions of the changes' reach to FILE.png")
	return c
}

func newBenchLocksCmd() *cobra.Command {
	var (
		data, plotFile string
		cfg            bench.LocksConfig
	)
	c := leaf("locks", "lock acquire+release round trips of one session against a running server: median and p99", func(*cobra.Command, []string) int {
		url, _, err := serverOf(data)
		if err != nil {
			return fail("bench locks", err)
		}
		cfg.URL = url
		ds, err := bench.Locks(cfg)
		if err != nil {
			return fail("bench locks", err)
		}
		bench.PrintLocks(os.Stdout, cfg, ds)
		if plotFile != "" {
			title := fmt.Sprintf("lock acquire+release round trips of one session (%d)", len(ds))
			if err := bench.PlotLatency(plotFile, title, []bench.Series{{Name: "F_SETLK + F_UNLCK", Ds: ds}}); err != nil {
				return fail("bench locks", err)
			}
		}
		return 0
	})
	fl := c.Flags()
	fl.StringVar(&data, "data", defaultDataDir(), "data dir of the running server (endpoints.json)")
	fl.StringVar(&cfg.Path, "path", "/bench-locks", "the file locked (created if missing)")
	fl.IntVar(&cfg.N, "n", 10000, "round trips per round")
	fl.IntVar(&cfg.Rounds, "rounds", 3, "rounds")
	fl.StringVar(&plotFile, "plot", "", "draw the round trips' distribution to FILE.png")
	return c
}
