package auth

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Unix authenticates a loopback client as the local user who owns its
// socket, as the kernel reports through sock_diag: EOS' "unix"
// authentication on a trusted host, but asserted by the kernel, not by
// the client. It does not apply to other clients.
type Unix struct{}

// HostRoot lets the host's root administer a server whose --auth does not
// accept unix peers: a loopback client owned by uid 0 is root on admin API
// requests, and only there (data requests still need a token or
// certificate). Root on the host owns the data directory and the signing
// keys, so this gives it nothing it does not have; without it, a
// token-only server could not be administered at all (tokens never act
// as root).
type HostRoot struct{}

// Authenticate implements Authenticator.
func (HostRoot) Authenticate(_ context.Context, r *Request) (Principal, bool, error) {
	if !r.Admin {
		return Principal{}, false, nil
	}
	p, ok := Peer(r.Remote, r.Local)
	return p, ok && p.IsRoot(), nil
}

// Authenticate implements Authenticator.
func (Unix) Authenticate(_ context.Context, r *Request) (Principal, bool, error) {
	p, ok := Peer(r.Remote, r.Local)
	return p, ok, nil
}

// Peer is the local user owning the client end of a loopback TCP
// connection (false for any other connection).
func Peer(remote, local net.Addr) (Principal, bool) {
	ra, ok1 := remote.(*net.TCPAddr)
	la, ok2 := local.(*net.TCPAddr)
	if !ok1 || !ok2 || !ra.IP.IsLoopback() {
		return Nobody, false
	}
	uid, err := socketOwner(ra, la)
	if err != nil {
		return Nobody, false
	}
	p := Principal{UID: uid, GID: 65534, Method: "unix", Name: strconv.FormatUint(uint64(uid), 10)}
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		p.Name = u.Username
		if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			p.GID = uint32(g)
		}
		if gids, err := u.GroupIds(); err == nil {
			for _, s := range gids {
				if g, err := strconv.ParseUint(s, 10, 32); err == nil {
					p.Groups = append(p.Groups, uint32(g))
				}
			}
		}
	} else if uid == 0 {
		p.GID, p.Name = 0, "root"
	}
	return p, true
}

// ProcessGroups is p, a unix peer, with the file system gid and the
// supplementary groups of local process pid (/proc/PID/status) when that
// process's file system uid is p's: the groups a local caller acts with
// (newgrp, a batch system's job group, an account with no entry in
// /etc/group), where the account's groups are only a guess. A peer can
// name only a process of its own uid, whose groups it could use anyway.
// Any other case (not a unix peer, no such process, another uid) is p.
func ProcessGroups(p Principal, pid uint32) Principal {
	if p.Method != "unix" || pid == 0 {
		return p
	}
	gid, groups, ok := ProcessIDs(pid, p.UID)
	if !ok {
		return p
	}
	p.GID, p.Groups = gid, groups
	return p
}

// ProcessIDs are the file system gid and the supplementary groups of
// local process pid, when its file system uid is uid (false otherwise,
// or when there is no such process).
func ProcessIDs(pid, uid uint32) (gid uint32, groups []uint32, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return 0, nil, false
	}
	return statusIDs(string(b), uid)
}

// statusIDs reads the file system gid and the groups from a
// /proc/PID/status whose file system uid is uid.
func statusIDs(status string, uid uint32) (gid uint32, groups []uint32, ok bool) {
	var uidOK, gidOK bool
	groups = []uint32{}
	for _, l := range strings.Split(status, "\n") {
		k, v, _ := strings.Cut(l, ":")
		f := strings.Fields(v)
		switch k {
		case "Uid", "Gid":
			if len(f) != 4 { // real, effective, saved, file system
				return 0, nil, false
			}
			n, err := strconv.ParseUint(f[3], 10, 32)
			if err != nil {
				return 0, nil, false
			}
			if k == "Uid" {
				uidOK = uint32(n) == uid
			} else {
				gid, gidOK = uint32(n), true
			}
		case "Groups":
			for _, s := range f {
				n, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return 0, nil, false
				}
				groups = append(groups, uint32(n))
			}
		}
	}
	return gid, groups, uidOK && gidOK
}

// socketOwner asks the kernel (NETLINK_SOCK_DIAG, one exact lookup, not a
// table scan) for the uid owning the client end of a TCP connection.
func socketOwner(client, server *net.TCPAddr) (uint32, error) {
	family, cip, sip := uint8(unix.AF_INET), client.IP.To4(), server.IP.To4()
	if cip == nil || sip == nil {
		family, cip, sip = unix.AF_INET6, client.IP.To16(), server.IP.To16()
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_INET_DIAG)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	// nlmsghdr (16) + inet_diag_req_v2 (56)
	req := make([]byte, 16+56)
	binary.LittleEndian.PutUint32(req[0:], uint32(len(req)))
	binary.LittleEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.LittleEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	b := req[16:]
	b[0], b[1] = family, unix.IPPROTO_TCP
	binary.LittleEndian.PutUint32(b[4:], 0xffffffff) // any state
	id := b[8:]                                      // inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], uint16(client.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(server.Port))
	copy(id[4:20], cip)
	copy(id[20:36], sip)
	binary.LittleEndian.PutUint32(id[40:], 0xffffffff) // no cookie
	binary.LittleEndian.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	resp := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, resp, 0)
	if err != nil {
		return 0, err
	}
	if n < 16 || binary.LittleEndian.Uint16(resp[4:]) != unix.SOCK_DIAG_BY_FAMILY || n < 16+72 {
		return 0, errors.New("sock_diag: socket not found")
	}
	return binary.LittleEndian.Uint32(resp[16+64:]), nil // inet_diag_msg.idiag_uid
}
