package namespace

import "strings"

// Paths follow the service's grammar (nsapi.CleanPath): every one is
// cleaned and checked before anything else touches it.

// components returns the names of a clean path ("/" has none).
func components(p string) []string {
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}
