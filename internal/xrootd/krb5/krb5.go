// Package krb5 is the client side of root://'s krb5 security protocol
// (XrdSecProtkrb5): the server's login answer names its service
// principal ("&P=krb5,xrootd/host@REALM"); the client gets a ticket for
// it with its own tickets (kinit's credential cache) and sends one
// kXR_auth whose body is "krb5\0" and a bare AP-REQ. The server side is
// xrootd.Krb5 over internal/auth/krb5auth.
package krb5

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/kaon-storage/kaon/internal/xrootd"
)

// Client logs in with the tickets of a Kerberos client
// (krb5auth.ClientFromEnv: the user's credential cache).
type Client struct{ KRB *client.Client }

var _ xrootd.ClientAuth = Client{}

func (Client) Name() string { return "krb5" }

// Begin returns "krb5\0" and an AP-REQ for the principal the server
// named; there is no second round.
func (c Client) Begin(params, _ string) (xrootd.ClientAuthExchange, []byte, error) {
	principal, _, _ := strings.Cut(params, ",")
	// The realm follows from the host ([domain_realm]), as for kinit's
	// tickets to any service.
	spn, _, _ := strings.Cut(principal, "@")
	if spn == "" {
		return nil, nil, errors.New("the server named no service principal")
	}
	tkt, key, err := c.KRB.GetServiceTicket(spn)
	if err != nil {
		return nil, nil, fmt.Errorf("no ticket for %s: %w", principal, err)
	}
	auth, err := types.NewAuthenticator(c.KRB.Credentials.Domain(), c.KRB.Credentials.CName())
	if err != nil {
		return nil, nil, err
	}
	req, err := messages.NewAPReq(tkt, key, auth)
	if err != nil {
		return nil, nil, err
	}
	b, err := req.Marshal()
	if err != nil {
		return nil, nil, err
	}
	return nil, append([]byte("krb5\x00"), b...), nil
}
