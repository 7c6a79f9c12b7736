//go:build ceph

package rados

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Available says whether this binary can serve RADOS filesystems.
const Available = true

// cluster is one librados connection (per ceph.conf and client id),
// shared by every filesystem that uses them: a connection holds a monitor
// session and threads of its own.
type cluster struct {
	conf, user string
	timeout    time.Duration

	mu      sync.Mutex
	conn    *rados.Conn
	fsid    string
	lastTry time.Time
	lastErr error

	statMu   sync.Mutex
	health   string
	healthAt time.Time
	df       map[string]poolStats
	dfAt     time.Time
	dfErr    error
}

type poolStats struct {
	Stored     uint64 `json:"stored"`
	Objects    uint64 `json:"objects"`
	MaxAvail   uint64 `json:"max_avail"`
	QuotaBytes uint64 `json:"quota_bytes"`
}

var (
	clustersMu sync.Mutex
	clusters   = map[[2]string]*cluster{}
)

// clusterOf returns the shared connection for conf and user; timeout
// bounds every librados operation on it (the first caller's wins).
func clusterOf(conf, user string, timeout time.Duration) *cluster {
	clustersMu.Lock()
	defer clustersMu.Unlock()
	k := [2]string{conf, user}
	c := clusters[k]
	if c == nil {
		c = &cluster{conf: conf, user: user, timeout: timeout}
		clusters[k] = c
	}
	return c
}

// reconnectEvery spaces out connection attempts to a cluster that could
// not be reached.
const reconnectEvery = 5 * time.Second

// connect returns the connection, connecting first if needed.
func (c *cluster) connect() (*rados.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		return c.conn, nil
	}
	if c.lastErr != nil && time.Since(c.lastTry) < reconnectEvery {
		return nil, c.lastErr
	}
	c.lastTry = time.Now()
	conn, err := c.dial()
	if err != nil {
		c.lastErr = err
		return nil, err
	}
	c.conn, c.lastErr = conn, nil
	c.fsid, _ = conn.GetFSID()
	return conn, nil
}

func (c *cluster) dial() (*rados.Conn, error) {
	var conn *rados.Conn
	var err error
	if c.user != "" {
		conn, err = rados.NewConnWithUser(c.user)
	} else {
		conn, err = rados.NewConn()
	}
	if err != nil {
		return nil, err
	}
	if c.conf != "" {
		err = conn.ReadConfigFile(c.conf)
	} else {
		err = conn.ReadDefaultConfigFile()
	}
	if err != nil {
		conn.Shutdown()
		return nil, fmt.Errorf("read ceph.conf %q: %w", c.conf, err)
	}
	if c.timeout > 0 {
		secs := strconv.Itoa(max(1, int(c.timeout.Seconds())))
		for _, opt := range []string{"rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout"} {
			if err := conn.SetConfigOption(opt, secs); err != nil {
				conn.Shutdown()
				return nil, fmt.Errorf("set %s: %w", opt, err)
			}
		}
	}
	if err := conn.Connect(); err != nil {
		conn.Shutdown()
		return nil, fmt.Errorf("connect as client.%s: %w", c.userName(), err)
	}
	return conn, nil
}

func (c *cluster) userName() string {
	if c.user == "" {
		return "admin"
	}
	return c.user
}

// statsEvery is how long pool statistics and health are reused: they are
// monitor commands, and every filesystem on the cluster asks every beat.
const statsEvery = 5 * time.Second

// pool returns the statistics of pool (ceph df detail).
func (c *cluster) pool(name string) (poolStats, error) {
	c.statMu.Lock()
	defer c.statMu.Unlock()
	if time.Since(c.dfAt) > statsEvery {
		c.df, c.dfErr = c.fetchDF()
		c.dfAt = time.Now()
	}
	if c.dfErr != nil {
		return poolStats{}, c.dfErr
	}
	st, ok := c.df[name]
	if !ok {
		return poolStats{}, fmt.Errorf("no pool %q in ceph df", name)
	}
	return st, nil
}

func (c *cluster) fetchDF() (map[string]poolStats, error) {
	conn, err := c.connect()
	if err != nil {
		return nil, err
	}
	out, status, err := conn.MonCommand([]byte(`{"prefix": "df", "detail": "detail", "format": "json"}`))
	if err != nil {
		return nil, fmt.Errorf("ceph df: %v %s", err, status)
	}
	var df struct {
		Pools []struct {
			Name  string    `json:"name"`
			Stats poolStats `json:"stats"`
		} `json:"pools"`
	}
	if err := json.Unmarshal(out, &df); err != nil {
		return nil, fmt.Errorf("ceph df: %w", err)
	}
	m := map[string]poolStats{}
	for _, p := range df.Pools {
		m[p.Name] = p.Stats
	}
	return m, nil
}

// healthText is the cluster's health as `ceph health` says it, with the
// summaries of its checks ("HEALTH_WARN: 1 osds down; ...").
func (c *cluster) healthText() string {
	c.statMu.Lock()
	defer c.statMu.Unlock()
	if time.Since(c.healthAt) < statsEvery {
		return c.health
	}
	c.health, c.healthAt = c.fetchHealth(), time.Now()
	return c.health
}

func (c *cluster) fetchHealth() string {
	conn, err := c.connect()
	if err != nil {
		return "cannot reach the cluster: " + err.Error()
	}
	out, status, err := conn.MonCommand([]byte(`{"prefix": "health", "format": "json"}`))
	if err != nil {
		return fmt.Sprintf("ceph health: %v %s", err, status)
	}
	var h struct {
		Status string `json:"status"`
		Checks map[string]struct {
			Summary struct {
				Message string `json:"message"`
			} `json:"summary"`
		} `json:"checks"`
	}
	if err := json.Unmarshal(out, &h); err != nil {
		return "ceph health: " + err.Error()
	}
	var msgs []string
	for _, ch := range h.Checks {
		msgs = append(msgs, ch.Summary.Message)
	}
	if len(msgs) == 0 {
		return h.Status
	}
	return h.Status + ": " + strings.Join(msgs, "; ")
}

// Health is the health of the Ceph cluster with fsid as seen through
// ceph.conf conf and client user, or "" when that connection is not to
// that cluster (or cannot be made): the Ceph health of filesystems inside
// a CephFS mount.
func Health(conf, user, fsid string, timeout time.Duration) string {
	c := clusterOf(conf, user, timeout)
	if _, err := c.connect(); err != nil {
		return ""
	}
	c.mu.Lock()
	same := c.fsid == fsid
	c.mu.Unlock()
	if !same {
		return ""
	}
	return c.healthText()
}

// errnoOf is the errno inside a go-ceph error.
func errnoOf(err error) (syscall.Errno, bool) {
	var ce interface{ ErrorCode() int }
	if errors.As(err, &ce) && ce.ErrorCode() < 0 {
		return syscall.Errno(-ce.ErrorCode()), true
	}
	return 0, false
}

// kindOf classifies a librados error. EDQUOT is a pool over its quota:
// the cluster has no room for it (NoSpace), not a user's quota.
func kindOf(err error) kerr.Kind {
	if e, ok := errnoOf(err); ok {
		if e == syscall.EDQUOT {
			return kerr.NoSpace
		}
		if k := kerr.KindOf(e); k != kerr.Internal {
			return k
		}
	}
	if k := kerr.KindOf(err); k != kerr.Internal {
		return k
	}
	return kerr.IO
}
