package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Netns is a network namespace a test made (`ip netns add`, root only):
// a role run inside it (its command line through Wrap, as
// etcdtest.Options.Wrap does) reaches the rest of the host, and is
// reached, only through the veth pairs Link adds, each a point-to-point
// link of its own addresses; taking one down is a network partition of
// exactly that link (nothing arrives, nothing fails, as when packets
// are dropped). The namespace and its links are deleted when the test
// ends, after the processes started later (test cleanups run last
// first), whether it passed or not; a test binary killed before its
// cleanups leaves them (`ip netns list`: kaon<pid>-*).
type Netns struct {
	t    testing.TB
	Name string
	path string

	mu    sync.Mutex
	links int
}

// NetLink is one veth pair between the test's own network namespace
// (Host, an address there) and a Netns (Inside, an address there).
type NetLink struct {
	ns     *Netns
	Host   string // the test's end's address
	Inside string // the namespace's end's address
	inside string // the namespace's end's interface
}

// NewNetns makes a network namespace of a name no other test uses, with
// its loopback up.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	// Names and addresses are unique per process (pid) and call (a
	// random subnet, checked free): tests of several engineers share the
	// host.
	name := fmt.Sprintf("kaon%d-%x", os.Getpid(), rand.Uint32()&0xffff)
	n := &Netns{t: t, Name: name, path: "/var/run/netns/" + name}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v %s", name, err, out)
		}
	})
	n.ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
	return n
}

// ip runs the ip command; a failure fails the test.
func (n *Netns) ip(args ...string) {
	n.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		n.t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
	}
}

// Wrap turns the command line name args into one that runs it inside
// the namespace (nsenter execs it: its pid is name's own).
func (n *Netns) Wrap(name string, args []string) (string, []string) {
	return "nsenter", append([]string{"--net=" + n.path, "--", name}, args...)
}

// Link adds a veth pair between the test's network namespace and n, each
// end with an address of a /30 subnet of 10.0.0.0/8 no interface of the
// host uses. It is deleted with the namespace.
func (n *Netns) Link() *NetLink {
	n.t.Helper()
	n.mu.Lock()
	i := n.links
	n.links++
	n.mu.Unlock()
	id := rand.Uint32() & 0xffffff // names fit IFNAMSIZ (15)
	host, inside := fmt.Sprintf("kv%06x-%dh", id, i), fmt.Sprintf("kv%06x-%dn", id, i)
	sub := freeSubnet(n.t)
	l := &NetLink{ns: n, Host: sub.hostAddr(1), Inside: sub.hostAddr(2), inside: inside}
	n.ip("link", "add", host, "type", "veth", "peer", "name", inside)
	n.t.Cleanup(func() { exec.Command("ip", "link", "del", host).Run() }) // gone with the namespace if it went first
	n.ip("link", "set", inside, "netns", n.Name)
	n.ip("addr", "add", l.Host+"/30", "dev", host)
	n.ip("link", "set", host, "up")
	n.ip("netns", "exec", n.Name, "ip", "addr", "add", l.Inside+"/30", "dev", inside)
	n.ip("netns", "exec", n.Name, "ip", "link", "set", inside, "up")
	return l
}

// SetUp takes the link down (false: a partition, the namespace's end
// down, so packets from the test's side are dropped without an error)
// or up again (true).
func (l *NetLink) SetUp(up bool) {
	l.ns.t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	l.ns.ip("netns", "exec", l.ns.Name, "ip", "link", "set", l.inside, state)
}

type subnet [4]byte

func (s subnet) hostAddr(i byte) string { return net.IPv4(s[0], s[1], s[2], s[3]+i).String() }

var subnetMu sync.Mutex

// freeSubnet picks a random /30 in 10.0.0.0/8 that overlaps no address
// on this host's interfaces and no route (a network reached through
// it).
func freeSubnet(t testing.TB) subnet {
	t.Helper()
	subnetMu.Lock()
	defer subnetMu.Unlock()
	for range 100 {
		r := rand.Uint32()
		s := subnet{10, byte(r >> 16), byte(r >> 8), byte(r) &^ 3}
		addrs, err := exec.Command("ip", "-4", "-o", "addr", "show").Output()
		if err != nil {
			t.Fatalf("ip addr show: %v", err)
		}
		routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
		if err != nil {
			t.Fatalf("ip route show: %v", err)
		}
		out := append(addrs, routes...)
		ours := &net.IPNet{IP: net.IP(s[:]), Mask: net.CIDRMask(30, 32)}
		free := true
		for _, f := range strings.Fields(string(out)) {
			if ip, nw, err := net.ParseCIDR(f); err == nil && (nw.Contains(ours.IP) || ours.Contains(ip)) {
				free = false
			}
		}
		if free {
			return s
		}
	}
	t.Fatal("no free /30 in 10.0.0.0/8")
	return subnet{}
}
