package metrics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/ha"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// namespaceCollector reads the namespace service at scrape time.
type namespaceCollector struct {
	ns *nsserver.Server

	up, capacity, used, files, slow, latency             *prometheus.Desc
	findings, checked, repairs, progress, passFiles      *prometheus.Desc
	lost, riskFiles, riskBytes, rebuilt, rebuiltB        *prometheus.Desc
	remaining, remainingB, rebuildRate, rebuildETA       *prometheus.Desc
	nsFiles, nsDirs, nsBytes                             *prometheus.Desc
	quotaBytes, quotaFiles, quotaLimBytes, quotaLimFiles *prometheus.Desc
}

// RegisterNamespace registers the namespace server's metrics (its view
// of the filesystems, fsck) on reg.
func RegisterNamespace(reg prometheus.Registerer, ns *nsserver.Server) {
	reg.MustRegister(&namespaceCollector{ns: ns,
		up:          desc("kaon_fs_up", "1 when the filesystem is booted and its storage server beats.", "fsid", "node", "path", "group"),
		capacity:    desc("kaon_fs_capacity_bytes", "Capacity of the filesystem (of its backend when shared).", "fsid"),
		used:        desc("kaon_fs_used_bytes", "Bytes used on the filesystem.", "fsid"),
		files:       desc("kaon_fs_files", "Stripes on the filesystem.", "fsid"),
		slow:        desc("kaon_fs_slow", "1 while the filesystem's I/O latency stands out from its group (slow disk).", "fsid"),
		latency:     desc("kaon_fs_io_latency_seconds", "I/O latency percentiles its storage server reports (small and large operations).", "fsid", "size", "percentile"),
		findings:    desc("kaon_fsck_findings", "Current fsck findings per error class.", "class"),
		checked:     desc("kaon_fsck_stripes_checked_total", "Stripes compared with the namespace."),
		repairs:     desc("kaon_fsck_repairs_total", "fsck repairs per class and result (repaired, dropped, skipped, failed).", "class", "result"),
		progress:    desc("kaon_fsck_scan_progress_ratio", "Fraction of a filesystem walked by the scan running on it.", "fsid"),
		passFiles:   desc("kaon_fsck_namespace_pass_files", "Files seen by the last (or running) fsck namespace pass."),
		lost:        desc("kaon_fs_lost", "1 while the filesystem is lost (configstatus lost): its stripes are rebuilt on the others, or were.", "fsid"),
		riskFiles:   desc("kaon_files_at_risk", "Files some of whose stripes cannot be read, by class: unreadable, one_failure_from_loss, degraded, rebuilding (being rebuilt now, counted in their class too).", "class"),
		riskBytes:   desc("kaon_bytes_at_risk", "Bytes of the files at risk, by class (kaon_files_at_risk).", "class"),
		rebuilt:     desc("kaon_rebuild_stripes_total", "Stripes of lost filesystems rebuilt since the namespace server started."),
		rebuiltB:    desc("kaon_rebuild_bytes_total", "Bytes of lost filesystems rebuilt since the namespace server started."),
		remaining:   desc("kaon_rebuild_stripes_remaining", "Stripes the running rebuilds still have to recreate."),
		remainingB:  desc("kaon_rebuild_bytes_remaining", "Bytes the running rebuilds still have to recreate."),
		rebuildRate: desc("kaon_rebuild_rate_bytes", "Bytes per second the running rebuilds recreate (last minute)."),
		rebuildETA:  desc("kaon_rebuild_eta_seconds", "Time the running rebuilds need at their rate (0: unknown or none)."),
		nsFiles:     desc("kaon_ns_files", "Files in the namespace (recycle bin and versions included)."),
		nsDirs:      desc("kaon_ns_directories", "Directories in the namespace (the root not counted)."),
		nsBytes:     desc("kaon_ns_bytes", "Bytes of the files in the namespace (logical sizes)."),
		quotaBytes: desc("kaon_quota_used_bytes", "Bytes a quota node counts for a user, group or project (kind).",
			"path", "kind", "id"),
		quotaFiles:    desc("kaon_quota_used_files", "Files a quota node counts for a user, group or project.", "path", "kind", "id"),
		quotaLimBytes: desc("kaon_quota_limit_bytes", "Byte limit of a quota node for a user, group or project (0: none).", "path", "kind", "id"),
		quotaLimFiles: desc("kaon_quota_limit_files", "File limit of a quota node for a user, group or project (0: none).", "path", "kind", "id"),
	})
}

func (c *namespaceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.capacity, c.used, c.files, c.slow, c.latency, c.findings, c.checked, c.repairs,
		c.progress, c.passFiles, c.lost, c.riskFiles, c.riskBytes, c.rebuilt, c.rebuiltB, c.remaining, c.remainingB, c.rebuildRate, c.rebuildETA,
		c.nsFiles, c.nsDirs, c.nsBytes, c.quotaBytes, c.quotaFiles, c.quotaLimBytes, c.quotaLimFiles} {
		ch <- d
	}
}

func (c *namespaceCollector) Collect(ch chan<- prometheus.Metric) {
	fss, _ := c.ns.Filesystems(context.Background(), auth.Root) // who may read metrics is Serve's to decide
	for _, f := range fss {
		id := fmt.Sprint(f.ID)
		up, slow := 0.0, 0.0
		if f.BootStatus == "booted" {
			up = 1
		}
		if f.Slow != "" {
			slow = 1
		}
		ch <- gauge(c.up, up, id, f.Node, f.Path, f.Group)
		ch <- gauge(c.capacity, float64(f.Capacity), id)
		ch <- gauge(c.used, float64(f.Used), id)
		ch <- gauge(c.files, float64(f.Files), id)
		ch <- gauge(c.slow, slow, id)
		lost := 0.0
		if f.ConfigStatus == "lost" {
			lost = 1
		}
		ch <- gauge(c.lost, lost, id)
		latencies(ch, c.latency, (*message.Latency)(f.Latency), id)
	}
	r := c.ns.Risk()
	for _, k := range []struct {
		class string
		n     nsserver.FileCount
	}{{"unreadable", r.Unreadable}, {"one_failure_from_loss", r.Critical}, {"degraded", r.Degraded}, {"rebuilding", r.Rebuilding}} {
		ch <- gauge(c.riskFiles, float64(k.n.Files), k.class)
		ch <- gauge(c.riskBytes, float64(k.n.Bytes), k.class)
	}
	ch <- counter(c.rebuilt, float64(r.Rebuilt.Files))
	ch <- counter(c.rebuiltB, float64(r.Rebuilt.Bytes))
	ch <- gauge(c.remaining, float64(r.Remaining.Files))
	ch <- gauge(c.remainingB, float64(r.Remaining.Bytes))
	ch <- gauge(c.rebuildRate, r.Rate)
	ch <- gauge(c.rebuildETA, r.ETA.Seconds())
	fc := c.ns.FsckCounters()
	for class, n := range fc.Findings {
		ch <- gauge(c.findings, float64(n), string(class))
	}
	ch <- counter(c.checked, float64(fc.Checked))
	// Every class and result has a series from the start (rates and
	// dashboards need one), those repairs ran besides.
	repairs := map[string]int64{}
	for class := range fc.Findings {
		for _, result := range []string{"repaired", "dropped", "skipped", "failed"} {
			repairs[string(class)+"/"+result] = 0
		}
	}
	for k, n := range fc.Repairs {
		repairs[k] = n
	}
	for k, n := range repairs {
		class, result, _ := strings.Cut(k, "/")
		ch <- counter(c.repairs, float64(n), class, result)
	}
	for id, frac := range fc.Scanning {
		ch <- gauge(c.progress, frac, fmt.Sprint(id))
	}
	ch <- gauge(c.passFiles, float64(fc.PassFiles))
	ctx := context.Background()
	if root, err := c.ns.Stat(ctx, auth.Root, "/"); err == nil {
		ch <- gauge(c.nsFiles, float64(root.TreeFiles))
		ch <- gauge(c.nsDirs, float64(root.TreeDirs))
		ch <- gauge(c.nsBytes, float64(root.TreeSize))
	}
	qs, _ := c.ns.Quotas(ctx, auth.Root, "/")
	for _, q := range qs {
		id, kind := fmt.Sprint(q.ID), string(q.Kind)
		ch <- gauge(c.quotaBytes, float64(q.UsedBytes), q.Path, kind, id)
		ch <- gauge(c.quotaFiles, float64(q.UsedFiles), q.Path, kind, id)
		ch <- gauge(c.quotaLimBytes, float64(q.LimitBytes), q.Path, kind, id)
		ch <- gauge(c.quotaLimFiles, float64(q.LimitFiles), q.Path, kind, id)
	}
}

// storageCollector reads a storage server at scrape time.
type storageCollector struct {
	s *storage.Server

	ops, errs, bytes, dur, latency          *prometheus.Desc
	scans, stripes, scrubbed, running, last *prometheus.Desc
	badBlocks, heals                        *prometheus.Desc
	uploads, reads, tpc, tpcBytes           *prometheus.Desc
}

// RegisterStorage registers a storage server's metrics (I/O per
// filesystem and operation, fsck scans) on reg.
func RegisterStorage(reg prometheus.Registerer, s *storage.Server) {
	reg.MustRegister(&storageCollector{s: s,
		ops:      desc("kaon_fst_io_operations_total", "I/O operations on the filesystem, by operation.", "fsid", "op"),
		errs:     desc("kaon_fst_io_errors_total", "I/O operations that failed.", "fsid", "op"),
		bytes:    desc("kaon_fst_io_bytes_total", "Bytes read and written.", "fsid", "op"),
		dur:      desc("kaon_fst_io_duration_seconds", "Duration of I/O operations.", "fsid", "op"),
		latency:  desc("kaon_fst_io_latency_seconds", "I/O latency percentiles over the recent window (slow-disk detection).", "fsid", "size", "percentile"),
		scans:    desc("kaon_fsck_scans_total", "fsck scans of the filesystem, by result (done, failed).", "fsid", "result"),
		stripes:  desc("kaon_fsck_scanned_stripes_total", "Stripes walked by fsck scans.", "fsid"),
		scrubbed: desc("kaon_fsck_scrubbed_bytes_total", "Bytes re-read by fsck scrubs.", "fsid"),
		running:  desc("kaon_fsck_scan_running", "1 while a scan of the filesystem runs.", "fsid"),
		last:     desc("kaon_fsck_last_scan_timestamp_seconds", "When the last scan of the filesystem completed (unix time).", "fsid"),
		badBlocks: desc("kaon_fst_bad_blocks_total", "Bad bytes found in stripes on the filesystem: reads that met a block failing its crc32c "+
			"(an erasure-coded stripe found corrupt), blocks (frames) scrubs found failing.", "fsid", "found"),
		heals: desc("kaon_fst_heals_total", "Background repairs of stripes on the filesystem a read found bad, by result "+
			"(repaired, damaged: marked damaged beyond repair, failed).", "fsid", "result"),
		uploads: desc("kaon_fst_uploads_in_flight", "Uploads open on the storage server (HTTP and root:// clients, copies into it, conversions)."),
		reads:   desc("kaon_fst_downloads_in_flight", "Files open for reading on the storage server (clients, copies out of it)."),
		tpc: desc("kaon_tpc_transfers_total", "Third-party copies the storage server ran, by protocol (http, root), "+
			"direction (pull: into Kaon, push: out of it) and result (done, failed).", "protocol", "direction", "result"),
		tpcBytes: desc("kaon_tpc_bytes_total", "Bytes of the third-party copies that succeeded.", "protocol", "direction"),
	})
}

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ops, c.errs, c.bytes, c.dur, c.latency, c.scans, c.stripes, c.scrubbed, c.running, c.last,
		c.badBlocks, c.heals, c.uploads, c.reads, c.tpc, c.tpcBytes} {
		ch <- d
	}
}

// durationBounds are the histogram bounds exported: every doubling of
// the storage server's latency buckets.
var durationBounds = func() []int {
	var out []int
	for i := 0; i < storage.LatencyBuckets-1; i += storage.LatencyBucketsPerDoubling {
		out = append(out, i)
	}
	return out
}()

func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	for _, fs := range c.s.IOStats() {
		id := fmt.Sprint(fs.FsID)
		for op, o := range fs.Ops {
			ch <- counter(c.ops, float64(o.Count), id, op)
			ch <- counter(c.errs, float64(o.Errors), id, op)
			if o.Bytes > 0 {
				ch <- counter(c.bytes, float64(o.Bytes), id, op)
			}
			if o.Untimed {
				continue
			}
			buckets := make(map[float64]uint64, len(durationBounds))
			var cum uint64
			next := 0
			for i, n := range o.Hist[:storage.LatencyBuckets-1] {
				cum += n
				if next < len(durationBounds) && i == durationBounds[next] {
					buckets[storage.LatencyUpper(i).Seconds()] = cum
					next++
				}
			}
			ch <- prometheus.MustNewConstHistogram(c.dur, uint64(o.Count), o.Sum.Seconds(), buckets, id, op)
		}
		latencies(ch, c.latency, fs.Latency, id)
	}
	for _, st := range c.s.ScanStats() {
		id := fmt.Sprint(st.FsID)
		running := 0.0
		if st.Running {
			running = 1
		}
		ch <- counter(c.scans, float64(st.Scans), id, "done")
		ch <- counter(c.scans, float64(st.Failed), id, "failed")
		ch <- counter(c.stripes, float64(st.Stripes), id)
		ch <- counter(c.scrubbed, float64(st.Bytes), id)
		ch <- gauge(c.running, running, id)
		if !st.LastDone.IsZero() {
			ch <- gauge(c.last, float64(st.LastDone.UnixNano())/1e9, id)
		}
	}
	for _, b := range c.s.BitrotStats() {
		id := fmt.Sprint(b.FsID)
		ch <- counter(c.badBlocks, float64(b.ReadBad), id, "read")
		ch <- counter(c.badBlocks, float64(b.ScrubBad), id, "scrub")
		ch <- counter(c.heals, float64(b.Repaired), id, "repaired")
		ch <- counter(c.heals, float64(b.Damaged), id, "damaged")
		ch <- counter(c.heals, float64(b.Failed), id, "failed")
	}
	up, rd := c.s.InFlight()
	ch <- gauge(c.uploads, float64(up))
	ch <- gauge(c.reads, float64(rd))
	// Every kind is shown from the start, so rates and alerts have a series.
	copies := c.s.Copies()
	for _, proto := range []string{"http", "root"} {
		for _, dir := range []string{"pull", "push"} {
			n := copies[storage.TPCKind{Protocol: proto, Direction: dir}]
			ch <- counter(c.tpc, float64(n.Done), proto, dir, "done")
			ch <- counter(c.tpc, float64(n.Failed), proto, dir, "failed")
			ch <- counter(c.tpcBytes, float64(n.Bytes), proto, dir)
		}
	}
}

// XRootD are the root:// metrics of a process's listeners, by role:
// requests by kind and answer, their durations (observed through each
// server's Config.Observe), and the listeners' totals read at scrape time.
type XRootD struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	mu    sync.Mutex
	roles []*XRootDRole

	errs, redirs, in, out, conns *prometheus.Desc
}

// XRootDRole are the root:// listeners of one role (mgm, fst).
type XRootDRole struct {
	x       *XRootD
	role    string
	servers func() []*xrootd.Server
}

// RegisterXRootD registers the root:// metrics of a process on reg.
func RegisterXRootD(reg prometheus.Registerer) *XRootD {
	x := &XRootD{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaon_xrootd_requests_total",
			Help: "root:// requests answered, by request kind and answer (ok, a kXR_* error, kXR_redirect, kXR_wait)."},
			[]string{"role", "request", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kaon_xrootd_request_duration_seconds",
			Help:    "Time from a root:// request's arrival to its final answer.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 11)}, []string{"role", "request"}),
		errs:   desc("kaon_xrootd_errors_total", "root:// requests answered with an error.", "role"),
		redirs: desc("kaon_xrootd_redirects_total", "root:// requests answered with a redirect.", "role"),
		in:     desc("kaon_xrootd_received_bytes_total", "Bytes received on root:// connections.", "role"),
		out:    desc("kaon_xrootd_sent_bytes_total", "Bytes sent on root:// connections.", "role"),
		conns:  desc("kaon_xrootd_connections", "root:// connections open.", "role"),
	}
	reg.MustRegister(x, x.requests, x.duration)
	return x
}

// Role adds the listeners of role (servers returns those running).
func (x *XRootD) Role(role string, servers func() []*xrootd.Server) *XRootDRole {
	r := &XRootDRole{x: x, role: role, servers: servers}
	x.mu.Lock()
	x.roles = append(x.roles, r)
	x.mu.Unlock()
	return r
}

// Observe counts one request answered (xrootd.Config.Observe).
func (r *XRootDRole) Observe(request, code string, took time.Duration) {
	r.x.requests.WithLabelValues(r.role, request, code).Inc()
	r.x.duration.WithLabelValues(r.role, request).Observe(took.Seconds())
}

func (x *XRootD) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{x.errs, x.redirs, x.in, x.out, x.conns} {
		ch <- d
	}
}

func (x *XRootD) Collect(ch chan<- prometheus.Metric) {
	x.mu.Lock()
	roles := append([]*XRootDRole(nil), x.roles...)
	x.mu.Unlock()
	for _, r := range roles {
		var t xrootd.Counters
		for _, s := range r.servers() {
			c := s.Counters()
			t.Errors += c.Errors
			t.Redirects += c.Redirects
			t.BytesIn += c.BytesIn
			t.BytesOut += c.BytesOut
			t.Connections += c.Connections
		}
		ch <- counter(x.errs, float64(t.Errors), r.role)
		ch <- counter(x.redirs, float64(t.Redirects), r.role)
		ch <- counter(x.in, float64(t.BytesIn), r.role)
		ch <- counter(x.out, float64(t.BytesOut), r.role)
		ch <- gauge(x.conns, float64(t.Connections), r.role)
	}
}

// latencies sends the percentiles of l that have samples.
func latencies(ch chan<- prometheus.Metric, d *prometheus.Desc, l *message.Latency, id string) {
	if l == nil {
		return
	}
	if l.SmallN > 0 {
		ch <- gauge(d, l.SmallP50.Seconds(), id, "small", "50")
		ch <- gauge(d, l.SmallP90.Seconds(), id, "small", "90")
		ch <- gauge(d, l.SmallP99.Seconds(), id, "small", "99")
	}
	if l.LargeN > 0 {
		ch <- gauge(d, l.LargeP50.Seconds(), id, "large", "50")
		ch <- gauge(d, l.LargeP90.Seconds(), id, "large", "90")
		ch <- gauge(d, l.LargeP99.Seconds(), id, "large", "99")
	}
}

// haCollector reads a replicated namespace server's figures.
type haCollector struct {
	figures             func() ha.Figures
	role, term, applied *prometheus.Desc
	lag                 *prometheus.Desc
}

// RegisterHA registers the metrics of a namespace server of a replicated
// instance: its role, the active server's term, its replica's revision
// and lag.
func RegisterHA(reg prometheus.Registerer, figures func() ha.Figures) {
	reg.MustRegister(&haCollector{figures: figures,
		role:    desc("kaon_ha_role", "1 for the role this namespace server has now (starting, standby, active).", "role"),
		term:    desc("kaon_ha_term", "Term of the active namespace server (the revision of its election); it changes at each failover."),
		applied: desc("kaon_ha_applied_revision", "Revision of the shared store this server's replica has applied."),
		lag: desc("kaon_ha_standby_lag_revisions", "Revisions this server's replica is behind the last commit the active server "+
			"published (0 on the active server)."),
	})
}

func (c *haCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.role, c.term, c.applied, c.lag} {
		ch <- d
	}
}

func (c *haCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.figures()
	for _, r := range []ha.Role{ha.Starting, ha.Standby, ha.Active} {
		v := 0.0
		if f.Role == r {
			v = 1
		}
		ch <- gauge(c.role, v, string(r))
	}
	ch <- gauge(c.term, float64(f.Term))
	ch <- gauge(c.applied, float64(f.Applied))
	ch <- gauge(c.lag, float64(f.Lag))
}

// refusalsCollector reads the refusals of a role's authentication.
type refusalsCollector struct {
	r       *auth.Refusals
	methods []string
	refused *prometheus.Desc
}

// RegisterRefusals registers the count of requests the authentication
// methods refused (methods: those configured, shown from the start).
func RegisterRefusals(reg prometheus.Registerer, r *auth.Refusals, methods ...string) {
	reg.MustRegister(&refusalsCollector{r: r, methods: methods,
		refused: desc("kaon_auth_refused_total", "Requests and logins refused by an authentication method (token, x509, unix, "+
			"none: no credential where one is required), by reason (expired, unauthenticated, denied, error).", "method", "reason")})
}

func (c *refusalsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.refused }

func (c *refusalsCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.r.Counts()
	for _, m := range c.methods {
		k := auth.Refusal{Method: m, Reason: "unauthenticated"}
		if _, ok := counts[k]; !ok {
			counts[k] = 0
		}
	}
	for k, n := range counts {
		ch <- counter(c.refused, float64(n), k.Method, k.Reason)
	}
}
