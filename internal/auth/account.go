package auth

import (
	"errors"
	"os/user"
	"strconv"
	"sync"
	"time"
)

// accountTTL is how long a local account's lookup is reused: getpwnam
// and getgrouplist cost ~0.3 ms a login (BenchmarkVerify in
// auth/krb5auth), more than verifying a Kerberos ticket; an account
// removed or regrouped counts within this long.
const accountTTL = 30 * time.Second

var accounts = struct {
	sync.Mutex
	m map[string]account
}{m: map[string]account{}}

type account struct {
	p   Principal
	err error
	at  time.Time
}

// LocalAccount is the principal of the local account name as method
// authenticated it (what: "a certificate", "a ticket", for the refusal of
// the superuser: credentials from outside never map to root, whose
// administration stays with local root).
func LocalAccount(name, method, what string) (Principal, error) {
	accounts.Lock()
	a, ok := accounts.m[name]
	accounts.Unlock()
	if !ok || time.Since(a.at) > accountTTL {
		a = lookupAccount(name)
		accounts.Lock()
		if len(accounts.m) > 4096 {
			clear(accounts.m)
		}
		accounts.m[name] = a
		accounts.Unlock()
	}
	if a.err != nil {
		return Principal{}, a.err
	}
	if a.p.UID == 0 {
		return Principal{}, errors.New(what + " never maps to the superuser")
	}
	p := a.p
	p.Method, p.Groups = method, append([]uint32(nil), a.p.Groups...)
	return p, nil
}

func lookupAccount(name string) account {
	a := account{at: time.Now()}
	u, err := user.Lookup(name)
	if err != nil {
		a.err = errors.New("no such local user")
		return a
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		a.err = errors.New("unusable uid/gid")
		return a
	}
	a.p = Principal{UID: uint32(uid), GID: uint32(gid), Name: u.Username}
	if gids, err := u.GroupIds(); err == nil {
		for _, s := range gids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				a.p.Groups = append(a.p.Groups, uint32(g))
			}
		}
	}
	return a
}
