package nsserver

import (
	"context"
	"os/user"
	"strconv"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// IOStat returns the I/O by user, group and application over the last
// minute, 5 minutes and hour (fleet.Accounting), of user r.User and
// application r.App when given (admin only: kaon io stat).
func (s *Server) IOStat(_ context.Context, p auth.Principal, r nsapi.IOStatRequest) ([]nsapi.IORow, error) {
	if err := requireRoot(p, "io stat"); err != nil {
		return nil, err
	}
	uid := int64(-1)
	if r.User != "" {
		n, err := strconv.ParseUint(r.User, 10, 32)
		if err != nil {
			u, lerr := user.Lookup(r.User)
			if lerr != nil {
				return nil, kerr.New(kerr.Invalid, "io stat", r.User, "no such local user (name it by uid)")
			}
			n, _ = strconv.ParseUint(u.Uid, 10, 32)
		}
		uid = int64(n)
	}
	return s.iostat.Stat(uid, r.App, s.now()), nil
}
