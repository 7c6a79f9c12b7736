package mgm

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/namespace"
)

// Nobody is the identity of clients Kaon cannot authenticate.
var Nobody = namespace.Caller{UID: 65534, GID: 65534}

type callerKey struct{}

// ConnContext authenticates a connection once, when it is accepted
// (http.Server.ConnContext). A loopback client is who owns its socket, as
// the kernel reports in /proc/net/tcp (EOS' "unix" authentication on a
// trusted host); any other client is nobody until token authentication
// exists.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, callerKey{}, peerCaller(c.RemoteAddr(), c.LocalAddr()))
}

func (s *Server) caller(r *http.Request) namespace.Caller {
	if c, ok := r.Context().Value(callerKey{}).(namespace.Caller); ok {
		return c
	}
	return Nobody
}

func peerCaller(remote, local net.Addr) namespace.Caller {
	ra, ok1 := remote.(*net.TCPAddr)
	la, ok2 := local.(*net.TCPAddr)
	if !ok1 || !ok2 || !ra.IP.IsLoopback() {
		return Nobody
	}
	uid, ok := socketOwner(ra, la)
	if !ok {
		return Nobody
	}
	c := namespace.Caller{UID: uid, GID: 65534}
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			c.GID = uint32(g)
		}
		if gids, err := u.GroupIds(); err == nil {
			for _, s := range gids {
				if g, err := strconv.ParseUint(s, 10, 32); err == nil {
					c.Groups = append(c.Groups, uint32(g))
				}
			}
		}
	} else if uid == 0 {
		c.GID = 0
	}
	return c
}

// socketOwner finds the uid owning the client end of a loopback TCP
// connection: the /proc/net/tcp{,6} row whose local address is the
// client's and remote address is ours.
func socketOwner(client, server *net.TCPAddr) (uint32, bool) {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if uid, ok := scanTCP(f, procAddr(client), procAddr(server)); ok {
			return uid, true
		}
	}
	return 0, false
}

// procAddr renders an address the way /proc/net/tcp prints it: the IP as
// host-order 32-bit words in hex, then the port.
func procAddr(a *net.TCPAddr) [2]string {
	ip := a.IP.To4()
	if ip == nil {
		ip = a.IP.To16()
	}
	var b strings.Builder
	for i := 0; i < len(ip); i += 4 {
		w := []byte{ip[i+3], ip[i+2], ip[i+1], ip[i]}
		b.WriteString(strings.ToUpper(hex.EncodeToString(w)))
	}
	return [2]string{b.String(), fmt.Sprintf("%04X", a.Port)}
}

func scanTCP(file string, local, remote [2]string) (uint32, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	want := local[0] + ":" + local[1]
	wantRemote := remote[0] + ":" + remote[1]
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[1] != want {
			continue
		}
		// IPv4-mapped peers appear in tcp6 with a mapped remote; match by
		// port when the address forms differ.
		if fields[2] != wantRemote && !strings.HasSuffix(fields[2], ":"+remote[1]) {
			continue
		}
		uid, err := strconv.ParseUint(fields[7], 10, 32)
		return uint32(uid), err == nil
	}
	return 0, false
}
