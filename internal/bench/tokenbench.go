package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TokenConfig is `kaon bench token`: small requests at a running server's
// namespace endpoint with and without a bearer token, in alternating
// rounds, to show what verifying (a cached) token costs per request.
type TokenConfig struct {
	URL      string // namespace endpoint
	Method   string // HEAD (answered by the namespace) or GET (answered with a 307)
	Requests int    // per round
	Workers  int    // concurrent clients, each on its own kept-alive connection
	Rounds   int    // rounds of each kind
	User     string // local user the token acts as
}

// TokenResult holds requests per second of every round.
type TokenResult struct {
	Plain, Token []float64
}

// Token runs the benchmark: it creates /bench-token/f (4 KiB) as the
// caller (root over loopback) and a token to read it.
func Token(c TokenConfig) (TokenResult, error) {
	ctx := context.Background()
	api := client.New(c.URL)
	_ = api.Mkdir(ctx, "/bench-token", 0o755, true)
	req, _ := http.NewRequest(http.MethodPut, c.URL+"/bench-token/f", strings.NewReader(strings.Repeat("k", 4096)))
	hc := &http.Client{}
	resp, err := hc.Do(req)
	if err != nil {
		return TokenResult{}, err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return TokenResult{}, fmt.Errorf("PUT /bench-token/f: %s", resp.Status)
	}
	tok, err := api.IssueToken(ctx, nsapi.TokenRequest{User: c.User, Paths: []string{"/bench-token"}, Scopes: []string{"storage.read"}, TTL: nsapi.Duration(time.Hour)})
	if err != nil {
		return TokenResult{}, fmt.Errorf("issue a token (run as root on the server's host): %w", err)
	}
	var res TokenResult
	for r := 0; r < c.Rounds; r++ {
		for _, withToken := range []bool{false, true} {
			rate, err := tokenRound(c, map[bool]string{true: tok}[withToken])
			if err != nil {
				return res, err
			}
			if withToken {
				res.Token = append(res.Token, rate)
			} else {
				res.Plain = append(res.Plain, rate)
			}
		}
	}
	return res, nil
}

// tokenRound fires c.Requests requests from c.Workers clients and returns
// requests per second.
func tokenRound(c TokenConfig, tok string) (float64, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: c.Workers}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var left atomic.Int64
	left.Store(int64(c.Requests))
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < c.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				req, _ := http.NewRequest(c.Method, c.URL+"/bench-token/f", nil)
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := hc.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode >= 400 {
						err = fmt.Errorf("%s /bench-token/f: %s", c.Method, resp.Status)
					}
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(c.Requests) / time.Since(start).Seconds(), firstErr
}

// Median of xs.
func Median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// PrintToken prints every round and the medians.
func PrintToken(w io.Writer, c TokenConfig, r TokenResult) {
	fmt.Fprintf(w, "%d %s requests per round, %d workers, %d rounds each, alternating\n", c.Requests, c.Method, c.Workers, c.Rounds)
	for i := range r.Plain {
		fmt.Fprintf(w, "round %d: no token %8.0f req/s   bearer token %8.0f req/s\n", i+1, r.Plain[i], r.Token[i])
	}
	p, t := Median(r.Plain), Median(r.Token)
	fmt.Fprintf(w, "median:  no token %8.0f req/s   bearer token %8.0f req/s   ratio %.2f\n", p, t, t/p)
}
