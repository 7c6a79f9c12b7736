package namespace

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Access control lists on directories, in the form EOS operators know.
//
//	sys.acl   = entry{,entry}      set by root; always evaluated
//	user.acl  = entry{,entry}      set by the owner; evaluated when the
//	                               directory has sys.eval.useracl set
//	entry     = u:UID:perms | g:GID:perms | z:perms
//	perms     = letters: r (read: list the directory, read its files),
//	            w (write: create, and delete and update unless denied),
//	            x (browse: search the directory),
//	            d (delete entries), u (update: replace existing files),
//	            !d (never delete), !u (never replace existing files)
//
// A directory's ACL applies to the directory itself and to the files in
// it; new directories inherit it (sys.* and user.acl are copied on
// mkdir). An ACL adds to what the mode bits allow, and its denials take
// away from both (root is never denied).
//
// The attributes: nsapi.AttrACL, nsapi.AttrUserACL, nsapi.AttrEvalACL.

// ACLEntry is one entry of an ACL.
type ACLEntry struct {
	Kind  byte   // 'u', 'g' or 'z'
	ID    uint32 // uid or gid (not for z)
	Grant uint32 // rights granted (Read, Write, Search, Delete, Update)
	Deny  uint32 // rights denied (Delete, Update)
}

// ParseACL reads an ACL value.
func ParseACL(s string) ([]ACLEntry, error) {
	var out []ACLEntry
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, raw := range strings.Split(s, ",") {
		e, err := parseACLEntry(strings.TrimSpace(raw))
		if err != nil {
			return nil, kerr.New(kerr.Invalid, "acl", s, err.Error())
		}
		out = append(out, e)
	}
	return out, nil
}

func parseACLEntry(s string) (ACLEntry, error) {
	parts := strings.Split(s, ":")
	var e ACLEntry
	var perms string
	switch {
	case len(parts) == 2 && parts[0] == "z":
		e.Kind, perms = 'z', parts[1]
	case len(parts) == 3 && (parts[0] == "u" || parts[0] == "g"):
		id, err := strconv.ParseUint(parts[1], 10, 32)
		if err != nil {
			return e, fmt.Errorf("entry %q: %s must be numeric", s, map[string]string{"u": "uid", "g": "gid"}[parts[0]])
		}
		e.Kind, e.ID, perms = parts[0][0], uint32(id), parts[2]
	default:
		return e, fmt.Errorf("entry %q: want u:UID:perms, g:GID:perms or z:perms", s)
	}
	for i := 0; i < len(perms); i++ {
		switch c := perms[i]; c {
		case 'r':
			e.Grant |= Read
		case 'w':
			e.Grant |= Write | Delete | Update
		case 'x':
			e.Grant |= Search
		case 'd':
			e.Grant |= Delete
		case 'u':
			e.Grant |= Update
		case '!':
			if i+1 == len(perms) || (perms[i+1] != 'd' && perms[i+1] != 'u') {
				return e, fmt.Errorf("entry %q: ! must be followed by d or u", s)
			}
			i++
			if perms[i] == 'd' {
				e.Deny |= Delete
			} else {
				e.Deny |= Update
			}
		default:
			return e, fmt.Errorf("entry %q: unknown permission %q (r, w, x, d, u, !d, !u)", s, c)
		}
	}
	e.Grant &^= e.Deny
	return e, nil
}

// aclRights returns what the ACLs of directory dir grant and deny c.
// Malformed values (they are validated when set) grant nothing.
func aclRights(c Caller, dir *Inode) (grant, deny uint32) {
	if dir == nil || len(dir.XAttrs) == 0 {
		return 0, 0
	}
	apply := func(v string) {
		es, _ := ParseACL(v)
		for _, e := range es {
			if e.Kind == 'z' || (e.Kind == 'u' && e.ID == c.UID) || (e.Kind == 'g' && (e.ID == c.GID || contains(c.Groups, e.ID))) {
				grant |= e.Grant
				deny |= e.Deny
			}
		}
	}
	if v := dir.XAttrs[nsapi.AttrACL]; v != "" {
		apply(v)
	}
	if v := dir.XAttrs[nsapi.AttrUserACL]; v != "" && dir.XAttrs[nsapi.AttrEvalACL] != "" {
		apply(v)
	}
	return grant &^ deny, deny
}
