// Package macaroon issues and verifies macaroons as XRootD's XrdMacaroons
// and dCache do, so that grid clients holding X.509 credentials (gfal2,
// FTS) can hand HTTP third-party copies a bearer credential for one path:
// the client POSTs to the path with Content-Type
// application/macaroon-request and a JSON body
//
//	{"caveats": ["activity:DOWNLOAD,LIST"], "validity": "PT30M"}
//
// and gets {"macaroon": "...", "expires_in": 1800}; the macaroon is then
// sent as Authorization: Bearer MACAROON, by the client or by the peer of
// the copy.
//
// A macaroon (gopkg.in/macaroon.v2) is signed with the instance's root key
// (derived from the capability key every server of the instance shares)
// and carries first-party caveats, each a condition every use must meet:
//
//	id:UID;GID[,GID...];NAME   who minted it (dCache's form): it acts as them
//	path:/P                    only below /P (several: below all of them)
//	activity:A[,A...]          only these (several: those in all of them)
//	before:RFC3339             only until then
//	dn:DN                      minted by the certificate DN, which the
//	                           grid-mapfile must still map to the id's user
//
// Activities are dCache's and XrdMacaroons': DOWNLOAD, LIST and
// READ_METADATA read; UPLOAD creates; DELETE, MANAGE and UPDATE_METADATA
// modify. A caveat Kaon does not know fails the macaroon, as macaroons
// require. A macaroon is the minter's identity narrowed to its path and
// activities (auth.Principal.Scopes), never more than the minter could do:
// a minter holding a scoped token gets no activity its scopes do not allow,
// root gets none (as tokens, a macaroon never acts as root).
//
// A macaroon minted by a grid-mapfile user (x509, gsi) carries the DN:
// each use asks CheckDN whether the grid-mapfile still maps it to the
// same user, so removing the DN revokes the macaroons it minted (the
// grid-mapfile is re-read when it changes: a stat per use). Macaroons
// minted from tokens, krb5 or unix carry no such caveat: they live until
// they expire, as their minter's credential cannot be checked again.
package macaroon

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"gopkg.in/macaroon.v2"
)

// ContentType is the Content-Type of a macaroon request.
const ContentType = "application/macaroon-request"

// Service mints macaroons and, in an auth.Chain, verifies them.
type Service struct {
	Key         []byte        // root key
	Location    string        // the instance's URL (informational)
	MaxValidity time.Duration // longest validity granted
	Now         func() time.Time
	// CheckDN says why dn is no longer mapped to user by the
	// grid-mapfile (nil: it still is); nil: no grid-mapfile, and a
	// macaroon with a dn caveat is refused.
	CheckDN func(dn, user string) error
}

// activities maps each activity to the scope operation it needs.
var activities = map[string]string{
	"DOWNLOAD": auth.ScopeRead, "LIST": auth.ScopeRead, "READ_METADATA": auth.ScopeRead,
	"UPLOAD": auth.ScopeCreate,
	"DELETE": auth.ScopeModify, "MANAGE": auth.ScopeModify, "UPDATE_METADATA": auth.ScopeModify,
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Request is a macaroon request's JSON body.
type Request struct {
	Caveats  []string `json:"caveats"`
	Validity string   `json:"validity"` // ISO 8601 duration: PT30M, P1DT2H
}

// Response is the answer to a macaroon request.
type Response struct {
	Macaroon  string `json:"macaroon"`
	ExpiresIn int64  `json:"expires_in"` // seconds
	// What was granted, for the audit log (never the macaroon).
	Activities []string  `json:"-"`
	Expires    time.Time `json:"-"`
}

// Mint makes a macaroon for p below path p (clean, absolute) with the
// request's caveats. It fails naming the caveat when the request asks for
// what p may not do, or for a caveat Kaon does not know.
func (s *Service) Mint(who auth.Principal, p string, req Request) (Response, error) {
	validity := s.MaxValidity
	if req.Validity != "" {
		d, err := parseDuration(req.Validity)
		if err != nil || d <= 0 {
			return Response{}, kerr.New(kerr.Invalid, "macaroon", p, fmt.Sprintf("validity %q is not an ISO 8601 duration", req.Validity))
		}
		validity = min(d, s.MaxValidity)
	}
	if who.UID == auth.Nobody.UID && who.Method == auth.Nobody.Method {
		return Response{}, kerr.New(kerr.Unauthenticated, "macaroon", p, "a macaroon is minted for an authenticated client only")
	}
	if who.IsRoot() {
		return Response{}, kerr.New(kerr.Permission, "macaroon", p, "a macaroon never acts as root")
	}
	if who.Method == "macaroon" {
		return Response{}, kerr.New(kerr.Permission, "macaroon", p, "a macaroon does not mint macaroons")
	}
	cavs := []string{idCaveat(who), "path:" + p}
	if who.DN != "" {
		cavs = append(cavs, "dn:"+who.DN)
	}
	var acts []string
	for _, c := range req.Caveats {
		k, v, _ := strings.Cut(c, ":")
		switch k {
		case "activity":
			for _, a := range strings.Split(v, ",") {
				op, ok := activities[a]
				if !ok {
					return Response{}, kerr.New(kerr.Invalid, "macaroon", p, fmt.Sprintf("unknown activity %q", a))
				}
				if !who.Allows(op, p) {
					return Response{}, kerr.New(kerr.Permission, "macaroon", p, fmt.Sprintf("activity %s is more than this client may do here", a))
				}
				acts = append(acts, a)
			}
			cavs = append(cavs, c)
		case "path":
			q := path.Clean("/" + v)
			cavs = append(cavs, "path:"+q)
		case "before":
			if _, err := time.Parse(time.RFC3339, v); err != nil {
				return Response{}, kerr.New(kerr.Invalid, "macaroon", p, fmt.Sprintf("caveat %q: not an RFC 3339 time", c))
			}
			cavs = append(cavs, c)
		default:
			return Response{}, kerr.New(kerr.Invalid, "macaroon", p, fmt.Sprintf("unknown caveat %q", c))
		}
	}
	if len(acts) == 0 {
		return Response{}, kerr.New(kerr.Invalid, "macaroon", p, "name the activities (caveat activity:DOWNLOAD,LIST,...)")
	}
	exp := s.now().Add(validity).UTC().Truncate(time.Second)
	cavs = append(cavs, "before:"+exp.Format(time.RFC3339))
	id := make([]byte, 16)
	rand.Read(id)
	m, err := macaroon.New(s.Key, []byte(hex.EncodeToString(id)), s.Location, macaroon.V2)
	if err != nil {
		return Response{}, err
	}
	for _, c := range cavs {
		if err := m.AddFirstPartyCaveat([]byte(c)); err != nil {
			return Response{}, err
		}
	}
	b, err := m.MarshalBinary()
	if err != nil {
		return Response{}, err
	}
	return Response{Macaroon: base64.RawURLEncoding.EncodeToString(b), ExpiresIn: int64(validity / time.Second), Activities: acts, Expires: exp}, nil
}

func idCaveat(p auth.Principal) string {
	gids := []string{strconv.FormatUint(uint64(p.GID), 10)}
	for _, g := range p.Groups {
		if g != p.GID {
			gids = append(gids, strconv.FormatUint(uint64(g), 10))
		}
	}
	return fmt.Sprintf("id:%d;%s;%s", p.UID, strings.Join(gids, ","), p.Name)
}

// TakesBearer marks a method of bearer credentials (auth.BearerMethod).
func (s *Service) TakesBearer() {}

// Authenticate implements auth.Authenticator: a bearer credential that is
// a macaroon is verified (signature, then every caveat); others pass.
func (s *Service) Authenticate(_ context.Context, r *auth.Request) (auth.Principal, bool, error) {
	m := decode(r.Bearer)
	if m == nil {
		return auth.Principal{}, false, nil
	}
	refuse := func(why string) (auth.Principal, bool, error) {
		return auth.Nobody, true, kerr.New(kerr.Permission, "", "", "macaroon refused: "+why)
	}
	conds, err := m.VerifySignature(s.Key, nil)
	if err != nil {
		return refuse("not signed by this instance")
	}
	p := auth.Principal{Method: "macaroon"}
	var paths []string
	var acts map[string]bool
	haveID, haveBefore := false, false
	var dns []string
	now := s.now()
	for _, c := range conds {
		k, v, _ := strings.Cut(c, ":")
		switch k {
		case "id":
			if haveID || !parseID(v, &p) {
				return refuse("caveat id is malformed")
			}
			haveID = true
		case "path":
			paths = append(paths, path.Clean("/"+v))
		case "activity":
			set := map[string]bool{}
			for _, a := range strings.Split(v, ",") {
				if acts == nil || acts[a] {
					set[a] = true
				}
			}
			acts = set
		case "before":
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return refuse("caveat before is malformed")
			}
			if !now.Before(t) {
				return refuse("expired at " + v)
			}
			haveBefore = true
		case "dn":
			dns = append(dns, v)
		default:
			return refuse(fmt.Sprintf("unknown caveat %q", k))
		}
	}
	if !haveID || !haveBefore || len(paths) == 0 {
		return refuse("it names no identity, path or expiry")
	}
	for _, dn := range dns {
		if s.CheckDN == nil {
			return refuse("minted by " + dn + " but this instance has no grid-mapfile to check it against")
		}
		if err := s.CheckDN(dn, p.Name); err != nil {
			return refuse(err.Error())
		}
	}
	// The path of the scopes is the deepest of the path caveats, if every
	// other covers it; paths on different branches allow nothing.
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	base := paths[0]
	for _, q := range paths[1:] {
		if !auth.Covers(q, base) {
			p.Scopes = []auth.Scope{}
			return p, true, nil
		}
	}
	p.Scopes = []auth.Scope{}
	ops := map[string]bool{}
	for a := range acts {
		if op, ok := activities[a]; ok && !ops[op] {
			ops[op] = true
			p.Scopes = append(p.Scopes, auth.Scope{Op: op, Path: base})
		}
	}
	slices.SortFunc(p.Scopes, func(a, b auth.Scope) int { return strings.Compare(a.Op, b.Op) })
	return p, true, nil
}

// decode is the macaroon of a bearer credential (base64 of either
// alphabet, padded or not, of the V1 or V2 binary form), nil if it is
// none (a JWT, say).
func decode(s string) *macaroon.Macaroon {
	if s == "" || strings.Contains(s, ".") {
		return nil
	}
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
		b, err := enc.DecodeString(s)
		if err != nil {
			continue
		}
		var m macaroon.Macaroon
		if m.UnmarshalBinary(b) == nil {
			return &m
		}
	}
	return nil
}

// parseID reads "UID;GID[,GID...];NAME" into p.
func parseID(v string, p *auth.Principal) bool {
	f := strings.SplitN(v, ";", 3)
	if len(f) != 3 {
		return false
	}
	uid, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil {
		return false
	}
	p.UID, p.Name = uint32(uid), f[2]
	for i, g := range strings.Split(f[1], ",") {
		gid, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return false
		}
		if i == 0 {
			p.GID = uint32(gid)
		}
		p.Groups = append(p.Groups, uint32(gid))
	}
	return true
}

var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$`)

// parseDuration reads the ISO 8601 durations macaroon requests use
// (PnDTnHnMnS, each part optional).
func parseDuration(s string) (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(s)
	if m == nil || s == "P" || s == "PT" {
		return 0, fmt.Errorf("not an ISO 8601 duration: %q", s)
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] != "" {
			n, err := strconv.ParseInt(m[i+1], 10, 64)
			if err != nil || n > 1<<20 {
				return 0, fmt.Errorf("not an ISO 8601 duration: %q", s)
			}
			d += time.Duration(n) * unit
		}
	}
	return d, nil
}
