package metrics

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/cluster/message"
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

	up, capacity, used, files, slow, latency        *prometheus.Desc
	findings, checked, repairs, progress, passFiles *prometheus.Desc
	lost, riskFiles, riskBytes, rebuilt, rebuiltB   *prometheus.Desc
	remaining, remainingB, rebuildRate, rebuildETA  *prometheus.Desc
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
		latency:     desc("kaon_fs_io_latency_seconds", "I/O latency percentiles its storage server reports (small and large operations).", "fsid", "size", "quantile"),
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
	})
}

func (c *namespaceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.capacity, c.used, c.files, c.slow, c.latency, c.findings, c.checked, c.repairs,
		c.progress, c.passFiles, c.lost, c.riskFiles, c.riskBytes, c.rebuilt, c.rebuiltB, c.remaining, c.remainingB, c.rebuildRate, c.rebuildETA} {
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
	for k, n := range fc.Repairs {
		class, result, _ := strings.Cut(k, "/")
		ch <- counter(c.repairs, float64(n), class, result)
	}
	for id, frac := range fc.Scanning {
		ch <- gauge(c.progress, frac, fmt.Sprint(id))
	}
	ch <- gauge(c.passFiles, float64(fc.PassFiles))
}

// storageCollector reads a storage server at scrape time.
type storageCollector struct {
	s *storage.Server

	ops, errs, bytes, dur, latency          *prometheus.Desc
	scans, stripes, scrubbed, running, last *prometheus.Desc
	badBlocks, heals                        *prometheus.Desc
}

// RegisterStorage registers a storage server's metrics (I/O per
// filesystem and operation, fsck scans) on reg.
func RegisterStorage(reg prometheus.Registerer, s *storage.Server) {
	reg.MustRegister(&storageCollector{s: s,
		ops:      desc("kaon_fst_io_operations_total", "I/O operations on the filesystem, by operation.", "fsid", "op"),
		errs:     desc("kaon_fst_io_errors_total", "I/O operations that failed.", "fsid", "op"),
		bytes:    desc("kaon_fst_io_bytes_total", "Bytes read and written.", "fsid", "op"),
		dur:      desc("kaon_fst_io_duration_seconds", "Duration of I/O operations.", "fsid", "op"),
		latency:  desc("kaon_fst_io_latency_seconds", "I/O latency percentiles over the recent window (slow-disk detection).", "fsid", "size", "quantile"),
		scans:    desc("kaon_fsck_scans_total", "fsck scans of the filesystem, by result (done, failed).", "fsid", "result"),
		stripes:  desc("kaon_fsck_scanned_stripes_total", "Stripes walked by fsck scans.", "fsid"),
		scrubbed: desc("kaon_fsck_scrubbed_bytes_total", "Bytes re-read by fsck scrubs.", "fsid"),
		running:  desc("kaon_fsck_scan_running", "1 while a scan of the filesystem runs.", "fsid"),
		last:     desc("kaon_fsck_last_scan_timestamp_seconds", "When the last scan of the filesystem completed (unix time).", "fsid"),
		badBlocks: desc("kaon_fst_bad_blocks_total", "Bad bytes found in stripes on the filesystem: reads that met a block failing its crc32c "+
			"(an erasure-coded stripe found corrupt), blocks (frames) scrubs found failing.", "fsid", "found"),
		heals: desc("kaon_fst_heals_total", "Background repairs of stripes on the filesystem a read found bad, by result "+
			"(repaired, damaged: marked damaged beyond repair, failed).", "fsid", "result"),
	})
}

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ops, c.errs, c.bytes, c.dur, c.latency, c.scans, c.stripes, c.scrubbed, c.running, c.last,
		c.badBlocks, c.heals} {
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
}

// xrootdCollector reads the root:// listeners of a role.
type xrootdCollector struct {
	role                               string
	servers                            func() []*xrootd.Server
	reqs, errs, redirs, in, out, conns *prometheus.Desc
}

// RegisterXRootD registers the totals of a role's root:// listeners
// (servers returns those running).
func RegisterXRootD(reg prometheus.Registerer, role string, servers func() []*xrootd.Server) {
	reg.MustRegister(&xrootdCollector{role: role, servers: servers,
		reqs:   desc("kaon_xrootd_requests_total", "root:// requests.", "role"),
		errs:   desc("kaon_xrootd_errors_total", "root:// requests answered with an error.", "role"),
		redirs: desc("kaon_xrootd_redirects_total", "root:// requests answered with a redirect.", "role"),
		in:     desc("kaon_xrootd_received_bytes_total", "Bytes received on root:// connections.", "role"),
		out:    desc("kaon_xrootd_sent_bytes_total", "Bytes sent on root:// connections.", "role"),
		conns:  desc("kaon_xrootd_connections", "root:// connections open.", "role"),
	})
}

func (c *xrootdCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.reqs, c.errs, c.redirs, c.in, c.out, c.conns} {
		ch <- d
	}
}

func (c *xrootdCollector) Collect(ch chan<- prometheus.Metric) {
	var t xrootd.Counters
	for _, s := range c.servers() {
		x := s.Counters()
		t.Requests += x.Requests
		t.Errors += x.Errors
		t.Redirects += x.Redirects
		t.BytesIn += x.BytesIn
		t.BytesOut += x.BytesOut
		t.Connections += x.Connections
	}
	ch <- counter(c.reqs, float64(t.Requests), c.role)
	ch <- counter(c.errs, float64(t.Errors), c.role)
	ch <- counter(c.redirs, float64(t.Redirects), c.role)
	ch <- counter(c.in, float64(t.BytesIn), c.role)
	ch <- counter(c.out, float64(t.BytesOut), c.role)
	ch <- gauge(c.conns, float64(t.Connections), c.role)
}

// latencies sends the percentiles of l that have samples.
func latencies(ch chan<- prometheus.Metric, d *prometheus.Desc, l *message.Latency, id string) {
	if l == nil {
		return
	}
	if l.SmallN > 0 {
		ch <- gauge(d, l.SmallP50.Seconds(), id, "small", "0.5")
		ch <- gauge(d, l.SmallP90.Seconds(), id, "small", "0.9")
		ch <- gauge(d, l.SmallP99.Seconds(), id, "small", "0.99")
	}
	if l.LargeN > 0 {
		ch <- gauge(d, l.LargeP50.Seconds(), id, "large", "0.5")
		ch <- gauge(d, l.LargeP90.Seconds(), id, "large", "0.9")
		ch <- gauge(d, l.LargeP99.Seconds(), id, "large", "0.99")
	}
}
