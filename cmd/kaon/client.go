package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/kaon-storage/kaon/internal/cluster"
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
	if b, err := os.ReadFile(filepath.Join(defaultDataDir(), "endpoints.json")); err == nil {
		var ep Endpoints
		if json.Unmarshal(b, &ep) == nil && ep.HTTP != "" {
			return ep.HTTP
		}
	}
	return "http://127.0.0.1:8000"
}

// apiClient calls the namespace server's admin JSON API.
type apiClient struct {
	base string
	http *http.Client
}

func newAPI(flagURL string) *apiClient {
	return &apiClient{base: serverURL(flagURL), http: &http.Client{}}
}

// apiError is an error returned by the server, already naming path and reason.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func (c *apiClient) do(method, route string, args map[string]any, out any) error {
	var body io.Reader
	u := c.base + "/api/v1/" + route
	if method == http.MethodGet {
		q := url.Values{}
		for k, v := range args {
			q.Set(k, fmt.Sprint(v))
		}
		u += "?" + q.Encode()
	} else {
		b, _ := json.Marshal(args)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach Kaon at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e cluster.ErrorBody
		if json.Unmarshal(data, &e) == nil && e.Message != "" {
			return &apiError{resp.StatusCode, e.Message}
		}
		return &apiError{resp.StatusCode, fmt.Sprintf("%s %s: HTTP %d", method, route, resp.StatusCode)}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (c *apiClient) get(route string, args map[string]any, out any) error {
	return c.do(http.MethodGet, route, args, out)
}

func (c *apiClient) post(route string, args map[string]any) error {
	return c.do(http.MethodPost, route, args, nil)
}

// fail prints err for a CLI command and returns the exit code.
func fail(cmd string, err error) int {
	fmt.Fprintf(os.Stderr, "kaon %s: %v\n", cmd, err)
	return 1
}
