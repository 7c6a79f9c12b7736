package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/auth/token/remote"
)

// AuthConfig is how a namespace server authenticates clients: the
// accepted methods, the token issuers it trusts, and its own issuer.
type AuthConfig struct {
	Methods   string        // --auth: unix, token, x509 (comma-separated)
	Issuers   []string      // --token-issuer ISSUER[=JWKS][,base=/p][,user=U][,map=FILE]
	Audiences []string      // --token-audience
	IssuerURL string        // --issuer-url: iss of this instance's tokens
	KeysTLS   *tls.Config   // trust for fetching issuers' keys (nil: the system's)
	MaxTTL    time.Duration // --token-max-ttl: issued and accepted tokens' longest lifetime
	// X509 is the x509 method (built from the TLS settings; nil without --tls).
	X509 auth.Authenticator
}

// keysClient fetches issuers' keys (nil: remote's default client).
func (a AuthConfig) keysClient() *http.Client {
	if a.KeysTLS == nil {
		return nil
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: a.KeysTLS}}
}

// withSecurity is a with what the role's TLS setup gives it: the x509
// method, and the trust for issuers' keys (the system's and --tls-ca-dir's).
func (a AuthConfig) withSecurity(s *security) AuthConfig {
	a.X509 = s.x509
	if s.tls != nil {
		a.KeysTLS = s.tls.Outbound()
	}
	return a
}

func (a *AuthConfig) bind(fl *flag.FlagSet) {
	fl.StringVar(&a.Methods, "auth", "unix",
		"accepted authentication methods, comma-separated: unix (loopback peers; others are nobody), token (bearer tokens), x509; without unix a client none applies to is refused")
	fl.Var((*stringList)(&a.Issuers), "token-issuer",
		"trusted token issuer ISSUER=JWKS (JWKS: a file or an https:// URL; ISSUER alone: its discovery document), options ,base=/PATH ,user=LOCALUSER ,map=FILE (repeatable)")
	fl.Var((*stringList)(&a.Audiences), "token-audience", "token audience this service accepts besides its own URL and the WLCG/SciTokens 'any' (repeatable)")
	fl.StringVar(&a.IssuerURL, "issuer-url", "", "iss of the tokens this instance issues, where it publishes its keys (default: its HTTP URL)")
	fl.DurationVar(&a.MaxTTL, "token-max-ttl", token.DefaultMaxTTL, "longest lifetime of the tokens this instance issues, and of any issuer's tokens it accepts (exp - iat; exp - now without iat)")
}

// openIssuer opens this instance's token issuer (keys in DATA/keys).
func (a AuthConfig) openIssuer(dir string) (*token.Issuer, error) {
	is, err := token.OpenIssuer(filepath.Join(dir, "keys", "token-keys.json"), a.MaxTTL)
	if err != nil {
		return nil, fmt.Errorf("token issuer: %w", err)
	}
	return is, nil
}

// issuerURL is the iss of this instance's tokens: --issuer-url, or the
// namespace endpoint's URL (an unspecified listen address named by the
// host name).
func (a AuthConfig) issuerURL(endpoint string) string {
	if a.IssuerURL != "" {
		return strings.TrimRight(a.IssuerURL, "/")
	}
	scheme, hostport, _ := strings.Cut(endpoint, "://")
	host, port, err := net.SplitHostPort(hostport)
	if err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			if h, err := os.Hostname(); err == nil {
				hostport = net.JoinHostPort(h, port)
			}
		}
	}
	return scheme + "://" + hostport
}

// chain builds the authenticators of --auth. A bearer token, when a
// request carries one, is tried first, then a client certificate, then
// the unix peer; the order of the flag's values does not matter.
func (a AuthConfig) chain(ctx context.Context, dir string, self *token.Issuer, log *slog.Logger) (auth.Chain, error) {
	has := map[string]bool{}
	for _, m := range strings.Split(a.Methods, ",") {
		switch m = strings.TrimSpace(m); m {
		case "unix", "token", "x509":
			has[m] = true
		case "":
		default:
			return nil, fmt.Errorf("--auth: unknown method %q (want unix, token, x509)", m)
		}
	}
	if len(has) == 0 {
		return nil, fmt.Errorf("--auth: name at least one method (unix, token, x509)")
	}
	var c auth.Chain
	if has["token"] {
		v, err := a.verifier(ctx, dir, self, log)
		if err != nil {
			return nil, err
		}
		c = append(c, v)
	} else if len(a.Issuers) > 0 {
		return nil, fmt.Errorf("--token-issuer given but --auth %q does not accept tokens", a.Methods)
	}
	if has["x509"] {
		if a.X509 == nil {
			return nil, fmt.Errorf("--auth x509 needs --tls (client certificates come with the TLS handshake)")
		}
		c = append(c, a.X509)
	}
	if has["unix"] {
		return append(c, auth.Unix{}), nil
	}
	return append(c, auth.HostRoot{}, auth.Refuse{Reason: "a bearer token is required"}), nil
}

// verifier trusts this instance's own tokens and those of --token-issuer.
func (a AuthConfig) verifier(ctx context.Context, dir string, self *token.Issuer, log *slog.Logger) (*token.Verifier, error) {
	issuers := []token.IssuerConfig{{Issuer: self.URL, Keys: self, Map: token.Mapping{SubjectIsUser: true}}}
	for _, spec := range a.Issuers {
		ic, keys, err := parseIssuer(spec, filepath.Join(dir, "keys", "token-jwks"), a.keysClient())
		if err != nil {
			return nil, fmt.Errorf("--token-issuer %s: %w", spec, err)
		}
		if keys != nil {
			go func() {
				if err := keys.Prefetch(ctx); err != nil {
					log.Warn("token issuer keys not fetched yet (tried again when a token needs them)", "issuer", keys.Issuer, "err", err)
				}
			}()
		}
		issuers = append(issuers, ic)
	}
	return token.New(token.Config{Issuers: issuers, Audiences: append([]string{self.URL}, a.Audiences...), MaxLifetime: a.MaxTTL})
}

// parseIssuer reads ISSUER[=JWKS][,base=/PATH][,user=U][,map=FILE]; the
// remote key set is returned for prefetching when the keys are fetched.
func parseIssuer(spec, cacheDir string, client *http.Client) (token.IssuerConfig, *remote.Keys, error) {
	parts := strings.Split(spec, ",")
	iss, src, _ := strings.Cut(parts[0], "=")
	ic := token.IssuerConfig{Issuer: iss}
	if iss == "" {
		return ic, nil, fmt.Errorf("no issuer")
	}
	for _, opt := range parts[1:] {
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "base":
			ic.Base = v
		case "user":
			ic.Map.User = v
		case "map":
			rules, err := token.LoadRules(v)
			if err != nil {
				return ic, nil, err
			}
			ic.Map.Rules = rules
		default:
			return ic, nil, fmt.Errorf("unknown option %q (want base=, user=, map=)", opt)
		}
	}
	if err := ic.Map.Check(); err != nil {
		return ic, nil, err
	}
	if src != "" && !strings.Contains(src, "://") {
		fk, err := token.NewFileKeys(src)
		if err != nil {
			return ic, nil, err
		}
		ic.Keys = fk
		return ic, nil, nil
	}
	if err := remote.CheckURL(iss); src == "" && err != nil {
		return ic, nil, err
	}
	if src != "" {
		if err := remote.CheckURL(src); err != nil {
			return ic, nil, err
		}
	}
	keys := &remote.Keys{Issuer: iss, URL: src, CacheDir: cacheDir, Client: client}
	ic.Keys = keys
	return ic, keys, nil
}
