package mgm

import (
	"net"
	"os"
	"testing"
)

func TestSocketOwnerOfOwnConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	uid, err := socketOwner(s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr))
	if err != nil || uid != uint32(os.Getuid()) {
		t.Fatalf("socket owner %d, %v; want %d", uid, err, os.Getuid())
	}
	if got := PeerCaller(s.RemoteAddr(), s.LocalAddr()); got.UID != uint32(os.Getuid()) {
		t.Fatalf("peerCaller %+v", got)
	}
	// A peer that is not on loopback is nobody.
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1234}
	if got := PeerCaller(remote, s.LocalAddr()); got.UID != Nobody.UID {
		t.Fatalf("non-loopback peer %+v", got)
	}
}
