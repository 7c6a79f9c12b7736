package kerr

import "testing"

// TestKindOfHTTP: a status read back is a kind with that status, and the
// statuses clients act on read back as the kind they mean.
func TestKindOfHTTP(t *testing.T) {
	for k := Kind(0); int(k) < len(kindNames); k++ {
		if got := KindOfHTTP(HTTPStatus(k)); HTTPStatus(got) != HTTPStatus(k) {
			t.Errorf("kind %v: status %d reads back as %v (status %d)", k, HTTPStatus(k), got, HTTPStatus(got))
		}
	}
	for status, want := range map[int]Kind{404: NotFound, 403: Permission, 401: Unauthenticated, 400: Invalid, 507: NoSpace,
		503: Busy, 500: Internal, 418: Internal} {
		if got := KindOfHTTP(status); got != want {
			t.Errorf("status %d: %v, want %v", status, got, want)
		}
	}
}
