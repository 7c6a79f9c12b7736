// Package krb5auth authenticates Kerberos clients: root://'s krb5 security
// protocol (the client's AP-REQ, as XRootD's XrdSecProtkrb5 sends it) and
// https's Negotiate (SPNEGO, RFC 4559, as curl --negotiate and davix send
// it). Both carry an AP-REQ; it is verified against the server's keytab
// with gokrb5 (ticket decrypted with the service key, authenticator with
// the session key, times within the clock skew, replays refused), and its
// client principal is mapped to a local user: user@REALM is the local
// account user when REALM is the realm of the keytab's principals (as MIT's
// default auth_to_local rule does); principals with an instance
// (user/admin@REALM), of other realms, or without a local account are
// refused, as is the superuser.
package krb5auth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jcmturner/gokrb5/v8/iana/errorcode"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/krberror"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// MaxSkew is the clock skew tolerated between clients and the server
// (Kerberos' customary 5 minutes).
const MaxSkew = 5 * time.Minute

// Method is the krb5 authentication method over a keytab.
type Method struct {
	kt *keytab.Keytab
	// Service is the principal root:// clients ask a ticket for (the
	// keytab's xrootd/HOST@REALM, else its first principal).
	Service string
	// Realm is the realm whose users map to local accounts (Service's).
	Realm string
	// lookup finds a local account (os/user; tests replace it).
	lookup func(name string) (auth.Principal, error)
	replay *replayFile // the replay cache on disk (nil: memory only)
}

// New reads the keytab at path (the server's keys: xrootd/HOST@REALM for
// root://, HTTP/HOST@REALM for https).
func New(path string) (*Method, error) {
	kt, err := keytab.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--krb5-keytab %s: %w", path, err)
	}
	return fromKeytab(kt, path)
}

func fromKeytab(kt *keytab.Keytab, path string) (*Method, error) {
	m := &Method{kt: kt, lookup: localUser}
	for _, e := range kt.Entries {
		name := strings.Join(e.Principal.Components, "/") + "@" + e.Principal.Realm
		if len(e.Principal.Components) == 0 {
			continue
		}
		if m.Service == "" || (e.Principal.Components[0] == "xrootd" && !strings.HasPrefix(m.Service, "xrootd/")) {
			m.Service, m.Realm = name, e.Principal.Realm
		}
	}
	if m.Service == "" {
		return nil, fmt.Errorf("--krb5-keytab %s: no keys", path)
	}
	return m, nil
}

// Authenticate implements auth.Authenticator: it applies to requests
// with a Kerberos credential.
func (m *Method) Authenticate(_ context.Context, r *auth.Request) (auth.Principal, bool, error) {
	if len(r.Kerberos) == 0 {
		return auth.Principal{}, false, nil
	}
	apreq, err := apReq(r.Kerberos)
	if err != nil {
		return auth.Nobody, true, kerr.New(kerr.Unauthenticated, "authenticate", "", "Kerberos credential refused: "+err.Error())
	}
	p, err := m.verify(apreq, r.Remote)
	if err != nil {
		return auth.Nobody, true, err
	}
	return p, true, nil
}

// Challenge is what a 401 offers clients of this method.
func (m *Method) Challenge() string { return "Negotiate" }

// apReq is the AP-REQ in b: a bare one (root:// krb5), or in a GSS-API
// token (https Negotiate: SPNEGO's NegTokenInit or a krb5 mechanism token).
func apReq(b []byte) (*messages.APReq, error) {
	switch b[0] {
	case 0x6e: // [APPLICATION 14] KRB_AP_REQ
		var a messages.APReq
		if err := a.Unmarshal(b); err != nil {
			return nil, errors.New("malformed AP-REQ")
		}
		return &a, nil
	case 0x60: // [APPLICATION 0] GSS-API InitialContextToken
	default:
		return nil, errors.New("not an AP-REQ nor a GSS-API initial token")
	}
	mech := b
	var st spnego.SPNEGOToken
	if st.Unmarshal(b) == nil {
		if !st.Init || len(st.NegTokenInit.MechTokenBytes) == 0 {
			return nil, errors.New("SPNEGO token without a Kerberos mechanism token")
		}
		mech = st.NegTokenInit.MechTokenBytes
	}
	var kt spnego.KRB5Token
	if err := kt.Unmarshal(mech); err != nil || !kt.IsAPReq() {
		return nil, errors.New("not a Kerberos AP-REQ (only Kerberos is negotiated)")
	}
	return &kt.APReq, nil
}

// verify checks a's ticket and authenticator and maps its client.
func (m *Method) verify(a *messages.APReq, remote net.Addr) (auth.Principal, error) {
	var addr types.HostAddress
	if ta, ok := remote.(*net.TCPAddr); ok {
		addr = types.HostAddressFromNetIP(ta.IP)
	}
	s := service.NewSettings(m.kt, service.MaxClockSkew(MaxSkew), service.ClientAddress(addr), service.DecodePAC(false))
	ok, creds, err := service.VerifyAPREQ(a, s)
	if err != nil || !ok {
		return auth.Nobody, kerr.New(kerr.Unauthenticated, "authenticate", "", "Kerberos ticket refused: "+why(a, err))
	}
	if err := m.remember(a); err != nil {
		return auth.Nobody, kerr.Wrap(kerr.Internal, "authenticate", "", fmt.Errorf("krb5 replay cache: %w", err))
	}
	name, realm := creds.CName().PrincipalNameString(), creds.Realm()
	who := name + "@" + realm
	switch {
	case realm != m.Realm:
		return auth.Nobody, kerr.New(kerr.Permission, "authenticate", "", fmt.Sprintf("Kerberos principal %s refused: realm %s is not this server's (%s)", who, realm, m.Realm))
	case len(creds.CName().NameString) != 1:
		return auth.Nobody, kerr.New(kerr.Permission, "authenticate", "", fmt.Sprintf("Kerberos principal %s refused: only user@%s principals map to local users", who, m.Realm))
	}
	p, err := m.lookup(name)
	if err != nil {
		return auth.Nobody, kerr.New(kerr.Permission, "authenticate", "", fmt.Sprintf("Kerberos principal %s maps to %q: %v", who, name, err))
	}
	return p, nil
}

// why says why gokrb5 refused an AP-REQ, in words a user acts on.
func why(a *messages.APReq, err error) string {
	var ke messages.KRBError
	if errors.As(err, &ke) {
		switch ke.ErrorCode {
		case errorcode.KRB_AP_ERR_TKT_EXPIRED:
			return "the ticket has expired (kinit again)"
		case errorcode.KRB_AP_ERR_TKT_NYV:
			return "the ticket is not yet valid"
		case errorcode.KRB_AP_ERR_REPEAT:
			return "replayed authenticator"
		case errorcode.KRB_AP_ERR_SKEW:
			return "clock skew with the client is too large"
		case errorcode.KRB_AP_ERR_BADADDR:
			return "the ticket is for another client address"
		}
		return ke.EText
	}
	var kre krberror.Krberror
	if errors.As(err, &kre) && kre.RootCause == krberror.DecryptingError {
		return fmt.Sprintf("the ticket for %s@%s is not sealed with this server's keys (forged, or issued by another KDC)",
			a.Ticket.SName.PrincipalNameString(), a.Ticket.Realm)
	}
	if err == nil {
		return "not valid"
	}
	return err.Error()
}

// localUser is the principal of a local account (never root).
func localUser(name string) (auth.Principal, error) {
	return auth.LocalAccount(name, "krb5", "a ticket")
}
