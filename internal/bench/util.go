package bench

import (
	"net/url"
	osexec "os/exec"
)

type urlPath struct{ p string }

func (u *urlPath) String() string { return (&url.URL{Path: u.p}).EscapedPath() }

func exec(name string, args ...string) error { return osexec.Command(name, args...).Run() }
