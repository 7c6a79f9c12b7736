package xrootd

import (
	"bytes"
	"context"
	"errors"
)

// krb5, as XRootD's XrdSecProtkrb5 speaks it: the login response names the
// service principal ("&P=krb5,xrootd/host@REALM"); the client asks its KDC
// for a ticket to exactly that principal and sends one kXR_auth with
// credential type "krb5" whose body is "krb5\0" followed by its AP-REQ
// (krb5_mk_req_extended: the ticket and an authenticator sealed with the
// session key). The server answers kXR_ok or refuses; there is no AP-REP
// (no mutual authentication) and, unless the server asks for forwarded
// tickets ("...,fwd", which Kaon does not), no second round. An AP-REQ is
// useless to an eavesdropper (the authenticator is bound to the session
// key and the replay cache refuses it twice), so krb5 is offered on
// plaintext connections too, as XRootD does.

// Krb5 is the krb5 security protocol for the service principal: verify
// says who an AP-REQ is (an error refuses the credential, with the reason).
func Krb5(principal string, verify func(ctx context.Context, p Peer, apreq []byte) (Identity, error)) SecProtocol {
	return krb5Protocol{principal, verify}
}

type krb5Protocol struct {
	principal string
	verify    func(ctx context.Context, p Peer, apreq []byte) (Identity, error)
}

func (krb5Protocol) Name() string { return "krb5" }

// Params is the service principal, on every connection.
func (k krb5Protocol) Params(bool) (string, bool) { return k.principal, true }

func (k krb5Protocol) Begin(p Peer) SecExchange { return &krb5Exchange{k, p} }

type krb5Exchange struct {
	krb5Protocol
	peer Peer
}

var krb5Ident = []byte("krb5\x00")

func (k *krb5Exchange) Step(ctx context.Context, cred []byte) ([]byte, Identity, error) {
	if !bytes.HasPrefix(cred, krb5Ident) {
		return nil, Identity{}, errors.New("malformed credentials")
	}
	apreq := cred[len(krb5Ident):]
	if len(apreq) == 0 {
		return nil, Identity{}, &Refusal{"no Kerberos ticket (kinit first)"}
	}
	id, err := k.verify(ctx, k.peer, apreq)
	if err != nil {
		return nil, Identity{}, &Refusal{err.Error()}
	}
	return nil, id, nil
}
