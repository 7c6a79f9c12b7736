package role

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/gateway"
	"github.com/kaon-storage/kaon/internal/auth/krb5auth"
	"github.com/kaon-storage/kaon/internal/auth/macaroon"
	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/auth/token/remote"
	"github.com/kaon-storage/kaon/internal/auth/x509auth"
	"github.com/kaon-storage/kaon/internal/capability"
)

// keysClient fetches issuers' keys: over TLS trusting the system's CAs
// and --tls-ca-dir's (nil without TLS: remote's default client).
func (s *Security) keysClient() *http.Client {
	if s == nil || s.tls == nil {
		return nil
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: s.tls.Outbound()}}
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

// chain builds the authenticators of --auth (x509 from sec's TLS setup).
// A bearer credential that came in plaintext is refused unless
// --auth-plaintext allows it; one that came over TLS is tried first (a
// macaroon, with token or x509, then a token), then a client certificate,
// then the unix peer; the order of the flag's values
// does not matter here (it orders root://'s security protocols: gsi's
// certificates reach the x509 method through the gsi handshake,
// Security.xrootd).
func (a AuthConfig) chain(ctx context.Context, dir string, self *token.Issuer, key *capability.Key, sec *Security, log *slog.Logger) (auth.Chain, error) {
	has := map[string]bool{}
	for _, m := range strings.Split(a.Methods, ",") {
		switch m = strings.TrimSpace(m); m {
		case "unix", "token", "x509", "gsi", "krb5", "gateway":
			has[m] = true
		case "":
		default:
			return nil, fmt.Errorf("--auth: unknown method %q (want unix, token, x509, gsi, krb5, gateway)", m)
		}
	}
	if len(has) == 0 {
		return nil, fmt.Errorf("--auth: name at least one method (unix, token, x509, gsi, krb5, gateway)")
	}
	var c auth.Chain
	switch a.Plaintext {
	case "refuse":
		if sec == nil || sec.tls == nil {
			return nil, fmt.Errorf("--auth-plaintext=refuse needs --tls (without it tokens can only come in plaintext)")
		}
		c = append(c, auth.RefusePlaintextBearer{})
	case "":
		if sec != nil && sec.tls != nil {
			c = append(c, auth.RefusePlaintextBearer{})
		}
	case "allow":
	default:
		return nil, fmt.Errorf("--auth-plaintext: %q is neither refuse nor allow", a.Plaintext)
	}
	if has["token"] || has["x509"] {
		// Macaroons: what grid clients with certificates hand third-party
		// copies (minted by httpfront for the chain's Service).
		ms := &macaroon.Service{Key: key.Derive("kaon-macaroon-v1"), Location: self.URL, MaxValidity: a.MaxTTL}
		if x, ok := sec.certs().(interface{ CheckDN(dn, user string) error }); ok {
			ms.CheckDN = x.CheckDN // a grid-mapfile user's macaroons die with their DN's line
		}
		c = append(c, ms)
	}
	if has["token"] {
		v, err := a.verifier(ctx, dir, self, sec.keysClient(), log)
		if err != nil {
			return nil, err
		}
		c = append(c, v)
	} else if len(a.Issuers) > 0 {
		return nil, fmt.Errorf("--token-issuer given but --auth %q does not accept tokens", a.Methods)
	}
	switch {
	case has["gateway"]:
		if len(a.Gateways) == 0 {
			return nil, fmt.Errorf("--auth gateway needs --gateway-key (the key file shared with the gateway hosts)")
		}
		var keys []gateway.Trusted
		for _, spec := range a.Gateways {
			t, err := gateway.ParseTrusted(spec)
			if err != nil {
				return nil, err
			}
			keys = append(keys, t)
		}
		m := gateway.New(keys...)
		log.Info("gateway hosts assert their callers' uids", "keys", m.Keys())
		c = append(c, m)
	case len(a.Gateways) > 0:
		return nil, fmt.Errorf("--gateway-key given but --auth %q does not list gateway", a.Methods)
	}
	if has["x509"] {
		if sec == nil || sec.x509 == nil {
			return nil, fmt.Errorf("--auth x509 needs --tls (client certificates come with the TLS handshake)")
		}
		c = append(c, sec.x509)
	}
	switch {
	case has["krb5"]:
		if a.Krb5Keytab == "" {
			return nil, fmt.Errorf("--auth krb5 needs --krb5-keytab (the service keys: xrootd/HOST@REALM, HTTP/HOST@REALM)")
		}
		m, err := krb5auth.New(a.Krb5Keytab)
		if err != nil {
			return nil, err
		}
		if err := m.OpenReplayCache(filepath.Join(dir, "krb5-replay")); err != nil {
			return nil, err // a replay cache lost in a restart would take a captured AP-REQ again
		}
		log.Info("Kerberos: root:// krb5 and https Negotiate", "service", m.Service, "realm", m.Realm)
		c = append(c, m)
	case a.Krb5Keytab != "":
		return nil, fmt.Errorf("--krb5-keytab given but --auth %q does not list krb5", a.Methods)
	}
	if has["unix"] {
		return append(c, auth.Unix{}), nil
	}
	return append(c, auth.HostRoot{}, auth.Refuse{Reason: required(has)}), nil
}

// required is why a server without unix refuses a client that brought
// none of the credentials its methods take.
func required(has map[string]bool) string {
	var what []string
	if has["token"] {
		what = append(what, "a bearer token")
	}
	if has["x509"] {
		what = append(what, "a client certificate (https)")
	}
	if has["gsi"] {
		what = append(what, "a grid proxy (root:// gsi: X509_USER_PROXY)")
	}
	if has["krb5"] {
		what = append(what, "a Kerberos ticket (kinit; root:// krb5, https Negotiate)")
	}
	if has["gateway"] {
		what = append(what, "a gateway's assertion (kaon mount -o gateway=KEYFILE)")
	}
	return strings.Join(what, " or ") + " is required"
}

// verifier trusts this instance's own tokens and those of --token-issuer.
func (a AuthConfig) verifier(ctx context.Context, dir string, self *token.Issuer, keys *http.Client, log *slog.Logger) (*token.Verifier, error) {
	issuers := []token.IssuerConfig{{Issuer: self.URL, Keys: self, Map: token.Mapping{SubjectIsUser: true}}}
	for _, spec := range a.Issuers {
		ic, keys, err := parseIssuer(spec, filepath.Join(dir, "keys", "token-jwks"), keys)
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

// parseIssuer reads
// ISSUER[=JWKS][,base=/PATH][,user=U][,map=FILE][,authz=user|capability];
// the remote key set is returned for prefetching when the keys are
// fetched. An issuer must say whom its tokens act as (user= or map=):
// one that does not is refused rather than quietly acting as nobody.
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
		case "authz":
			switch v {
			case "user":
				ic.Capability = false
			case "capability":
				ic.Capability = true
			default:
				return ic, nil, fmt.Errorf("authz=%q: want authz=user (the mapped user's mode bits and ACLs, scopes narrow) or authz=capability (the token's scopes authorize by themselves)", v)
			}
		default:
			return ic, nil, fmt.Errorf("unknown option %q (want base=, user=, map=, authz=)", opt)
		}
	}
	if ic.Map.User == "" && len(ic.Map.Rules) == 0 {
		return ic, nil, fmt.Errorf("no ,user=LOCALUSER or ,map=FILE: its tokens would act as nobody (say ,user=nobody if that is meant)")
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

// methodName names an authenticator of the chain for the refusals'
// metrics (the --auth method it is; "none": no credential where one is
// required).
func methodName(a auth.Authenticator) string {
	switch a.(type) {
	case *token.Verifier:
		return "token"
	case *macaroon.Service:
		return "macaroon"
	case *x509auth.X509:
		return "x509"
	case *krb5auth.Method:
		return "krb5"
	case *gateway.Method:
		return "gateway"
	case auth.Unix, auth.HostRoot:
		return "unix"
	case auth.Refuse, auth.RefusePlaintextBearer:
		return "none"
	}
	return "other"
}
