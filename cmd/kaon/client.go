package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/role/endpoints"
)

// serverURL finds the namespace server: --url, $KAON_URL, then the local
// all-in-one's endpoints.json, then the default port.
func serverURL(flagURL string) string {
	if flagURL != "" {
		return strings.TrimRight(flagURL, "/")
	}
	if u := os.Getenv("KAON_URL"); u != "" {
		return strings.TrimRight(u, "/")
	}
	if ep, err := endpoints.Read(defaultDataDir()); err == nil && ep.HTTP != "" {
		return ep.HTTP
	}
	return "http://127.0.0.1:8000"
}

// newAPI is a client of the namespace server the command talks to; it
// sends the bearer token of the environment, if any.
func newAPI(flagURL string) *client.Client {
	c := client.New(serverURL(flagURL))
	c.Token = envBearer()
	return c
}

// envBearer is the WLCG bearer token of the environment: $BEARER_TOKEN,
// else the content of $BEARER_TOKEN_FILE ("" if neither).
func envBearer() string {
	if t := strings.TrimSpace(os.Getenv("BEARER_TOKEN")); t != "" {
		return t
	}
	if f := os.Getenv("BEARER_TOKEN_FILE"); f != "" {
		if b, err := os.ReadFile(f); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// ctx is the context of a CLI request: it ends with the command.
func ctx() context.Context { return context.Background() }

// fail prints err for a CLI command and returns the exit code.
func fail(cmd string, err error) int {
	fmt.Fprintf(os.Stderr, "kaon %s: %v\n", cmd, err)
	return 1
}
