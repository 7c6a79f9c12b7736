//go:build !amd64 || purego

package checksum

// adlerUpdate folds p into the Adler-32 state (s1, s2), both < 65521.
func adlerUpdate(s1, s2 uint32, p []byte) (uint32, uint32) { return adlerGeneric(s1, s2, p) }
