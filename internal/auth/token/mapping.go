package token

import (
	"bufio"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
)

// Mapping turns a token's subject and groups (wlcg.groups) into a local
// identity, first that applies:
//
//  1. the first Rule matching the subject or one of the groups;
//  2. User, the one local user every token of the issuer acts as;
//  3. with SubjectIsUser (Kaon's own tokens only), the local user the
//     subject names;
//  4. nobody (uid and gid 65534), named after the subject.
//
// Each group "/x" that names a local group x is added to the principal's
// groups, so directory ACLs (g:GID:rx) apply. A token never acts as root:
// a mapping to uid 0 is refused.
type Mapping struct {
	User          string // local user name or uid; "" = none
	Rules         []Rule
	SubjectIsUser bool
}

// Rule maps a subject or a group to a local user.
type Rule struct {
	Claim string // "sub" or "group"
	Value string
	User  string // local user name or uid
}

// LoadRules reads a map file: one rule per line, "sub VALUE USER" or
// "group VALUE USER"; blank lines and lines starting with # are ignored.
func LoadRules(file string) ([]Rule, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rules []Rule
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 3 || (fs[0] != "sub" && fs[0] != "group") {
			return nil, fmt.Errorf("%s:%d: want \"sub VALUE USER\" or \"group VALUE USER\"", file, n)
		}
		rules = append(rules, Rule{Claim: fs[0], Value: fs[1], User: fs[2]})
	}
	return rules, sc.Err()
}

// Check resolves every user the mapping names, so a typo fails at start
// rather than on the first token.
func (m Mapping) Check() error {
	names := []string{}
	if m.User != "" {
		names = append(names, m.User)
	}
	for _, r := range m.Rules {
		names = append(names, r.User)
	}
	for _, n := range names {
		if _, err := LocalUser(n); err != nil {
			return err
		}
	}
	return nil
}

func (m Mapping) principal(sub string, groups []string) (auth.Principal, error) {
	name := ""
	for _, r := range m.Rules {
		if (r.Claim == "sub" && r.Value == sub) || (r.Claim == "group" && slices.Contains(groups, r.Value)) {
			name = r.User
			break
		}
	}
	if name == "" {
		name = m.User
	}
	if name == "" && m.SubjectIsUser {
		name = sub
	}
	p := auth.Principal{UID: auth.Nobody.UID, GID: auth.Nobody.GID, Name: sub}
	if name != "" {
		var err error
		if p, err = LocalUser(name); err != nil {
			return auth.Nobody, err
		}
	}
	if p.Name == "" {
		p.Name = "nobody"
	}
	p.Method, p.Subject = "token", sub
	for _, g := range groups {
		if !strings.HasPrefix(g, "/") {
			continue
		}
		if gr, err := user.LookupGroup(g[1:]); err == nil {
			if gid, err := strconv.ParseUint(gr.Gid, 10, 32); err == nil && !slices.Contains(p.Groups, uint32(gid)) {
				p.Groups = append(p.Groups, uint32(gid))
			}
		}
	}
	return p, nil
}

// localUser is the principal of local user name (or numeric uid, which
// need not have a passwd entry), never root.
func LocalUser(name string) (auth.Principal, error) {
	p := auth.Principal{UID: auth.Nobody.UID, GID: auth.Nobody.GID, Name: name}
	u, err := user.Lookup(name)
	if err != nil {
		n, nerr := strconv.ParseUint(name, 10, 32)
		if nerr != nil {
			return auth.Nobody, fmt.Errorf("no local user %q", name)
		}
		if u, err = user.LookupId(name); err != nil {
			u, p.UID = nil, uint32(n)
		}
	}
	if u != nil {
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return auth.Nobody, fmt.Errorf("local user %q has no numeric uid/gid", name)
		}
		p.UID, p.GID, p.Name = uint32(uid), uint32(gid), u.Username
		if gids, err := u.GroupIds(); err == nil {
			for _, s := range gids {
				if g, err := strconv.ParseUint(s, 10, 32); err == nil {
					p.Groups = append(p.Groups, uint32(g))
				}
			}
		}
	}
	if p.UID == 0 {
		return auth.Nobody, fmt.Errorf("tokens never act as root (user %q)", name)
	}
	return p, nil
}
