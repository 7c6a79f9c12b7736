package role

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.etcd.io/etcd/server/v3/embed"
)

// An etcd member inside a namespace server (kaon mgm --meta-peers): three hosts with one
// binary each are the whole replicated namespace, as QuarkDB runs inside
// EOS's namespace servers. The member is etcd's own server (embed, pinned
// with the client in go.mod), with its data in DATA/etcd; the namespace
// server then uses the members like any etcd cluster.

// peer is one member of --meta-peers.
type peer struct {
	name         string
	peer, client url.URL
}

// parsePeers reads NAME=http://HOST:PORT,...: each member's peer URL; its
// clients are served on the port below (etcd's 2380 and 2379).
func parsePeers(list string) ([]peer, error) {
	var out []peer
	for _, item := range strings.Split(list, ",") {
		name, raw, ok := strings.Cut(strings.TrimSpace(item), "=")
		u, err := url.Parse(raw)
		if !ok || name == "" || err != nil || u.Scheme != "http" || u.Port() == "" {
			return nil, fmt.Errorf("--meta-peers %q: want NAME=http://HOST:PEERPORT,... (clients on PEERPORT-1)", item)
		}
		port, _ := strconv.Atoi(u.Port())
		if port < 2 {
			return nil, fmt.Errorf("--meta-peers %q: bad port", item)
		}
		c := *u
		c.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port-1))
		out = append(out, peer{name: name, peer: *u, client: c})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--meta-peers: no members")
	}
	return out, nil
}

// startMember starts this server's member of --meta-peers and points URL
// at the members' client endpoints. The member serves once a majority of
// them runs; until then the namespace server waits for its store.
func (m *MetaConfig) startMember(data string, log *slog.Logger) (stop func(), err error) {
	peers, err := parsePeers(m.Peers)
	if err != nil {
		return nil, err
	}
	name := m.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	var self *peer
	var initial, clients []string
	for i, p := range peers {
		if p.name == name {
			self = &peers[i]
		}
		initial = append(initial, p.name+"="+p.peer.String())
		clients = append(clients, p.client.Host)
	}
	if self == nil {
		return nil, fmt.Errorf("--meta-peers: no member named %q (--meta-name)", name)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, filepath.Join(data, "etcd")
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{self.peer}, []url.URL{self.peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{self.client}, []url.URL{self.client}
	cfg.InitialCluster, cfg.InitialClusterToken = strings.Join(initial, ","), "kaon"
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once DATA/etcd holds a member
	cfg.MaxTxnOps, cfg.MaxRequestBytes = uint(m.TxnOps), uint(m.RequestBytes)
	cfg.QuotaBackendBytes = 8 << 30
	cfg.BackendFreelistType = "map"
	cfg.Logger, cfg.LogLevel, cfg.LogOutputs = "zap", "warn", []string{"stderr"}
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration // unset, every request is "slow"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: %w", name, err)
	}
	go func() {
		if err, ok := <-e.Err(); ok && err != nil {
			log.Error("etcd member failed", "member", name, "err", err)
		}
	}()
	m.URL = "etcd://" + strings.Join(clients, ",")
	log.Info("etcd member started", "member", name, "peers", m.Peers, "data", cfg.Dir)
	return e.Close, nil
}
