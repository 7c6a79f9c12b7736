// Package metrics exposes Kaon's servers to Prometheus (/metrics on the
// namespace server's HTTP endpoint and on every storage server's). The
// services below the front ends do not import Prometheus (its client
// pulls in net/http): they keep plain counters and snapshots
// (nsserver.FsckCounters, storage.IOStats, ...), and collectors here turn
// them into metrics when Prometheus scrapes. HTTP requests are counted by
// a middleware (Instrument); root:// totals come from the XRootD servers.
// Drain, balance and layout conversion report through Movement, a set of
// vectors their code sets.
//
// Metric names (labels in braces):
//
//	every server
//	  kaon_http_requests_total{role,route,method,code}     requests answered
//	  kaon_http_request_duration_seconds{role,route,method} time to the end of the response
//	  kaon_http_received_bytes_total{role,route}, kaon_http_sent_bytes_total{role,route}
//	  kaon_xrootd_requests_total{role}, _errors_total, _redirects_total, _received_bytes_total,
//	  _sent_bytes_total, kaon_xrootd_connections{role}     root:// listeners
//	  go_*, process_*                                      the Go runtime and the process
//	namespace server (role mgm)
//	  kaon_fs_up{fsid,node,path,group}                     1 when booted and beating
//	  kaon_fs_capacity_bytes{fsid}, kaon_fs_used_bytes{fsid}, kaon_fs_files{fsid}
//	  kaon_fs_slow{fsid}                                   1 while the filesystem stands out as slow
//	  kaon_fs_io_latency_seconds{fsid,size,quantile}       what its storage server reports (small/large, 0.5/0.99)
//	  kaon_fsck_findings{class}                            current findings per error class
//	  kaon_fsck_stripes_checked_total                      stripes compared with the namespace
//	  kaon_fsck_repairs_total{class,result}                repaired, dropped, skipped, failed
//	  kaon_fsck_scan_progress_ratio{fsid}                  scans running: fraction walked
//	  kaon_fsck_namespace_pass_files                       files seen by the last (or running) pass
//	  kaon_fs_lost{fsid}                                   1 while the filesystem is lost (configstatus lost)
//	  kaon_files_at_risk{class}, kaon_bytes_at_risk{class} unreadable, one_failure_from_loss, degraded, rebuilding
//	  kaon_rebuild_stripes_total, kaon_rebuild_bytes_total rebuilt since start
//	  kaon_rebuild_stripes_remaining, _bytes_remaining, kaon_rebuild_rate_bytes, kaon_rebuild_eta_seconds
//	  kaon_move_*{kind,fsid}                               drain, rebuild, balance, conversion (Movement)
//	storage server (role fst)
//	  kaon_fst_io_operations_total{fsid,op}, kaon_fst_io_errors_total{fsid,op}
//	  kaon_fst_io_bytes_total{fsid,op}                     bytes read and written
//	  kaon_fst_io_duration_seconds{fsid,op}                histogram of each operation on each filesystem
//	  kaon_fst_io_latency_seconds{fsid,size,quantile}      percentiles over the recent window (slow-disk detection)
//	  kaon_fsck_scans_total{fsid,result}, kaon_fsck_scanned_stripes_total{fsid},
//	  kaon_fsck_scrubbed_bytes_total{fsid}, kaon_fsck_scan_running{fsid},
//	  kaon_fsck_last_scan_timestamp_seconds{fsid}
//	  kaon_fst_bad_blocks_total{fsid,found}                bitrot met by reads, found by scrubs (read, scrub)
//	  kaon_fst_heals_total{fsid,result}                    background repairs of what reads met (repaired, damaged, failed)
//
// Who may read them is the server's --metrics-access (Allow): anyone,
// clients on its host, or the admin role.
package metrics

import (
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Path is where metrics are served.
const Path = "/metrics"

// NewRegistry returns a registry with the Go runtime and process
// collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves reg in Prometheus' formats.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// Serve routes GET Path to reg, for the clients allow lets through (nil:
// every client), and everything else to h.
func Serve(h http.Handler, reg *prometheus.Registry, allow func(*http.Request) error) http.Handler {
	mh := Handler(reg)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Path && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			if allow != nil {
				if err := allow(r); err != nil {
					status := kerr.HTTPStatus(kerr.KindOf(err))
					if status == http.StatusUnauthorized {
						w.Header().Set("WWW-Authenticate", `Bearer realm="kaon"`)
					}
					http.Error(w, err.Error(), status)
					return
				}
			}
			mh.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Accesses are the values of --metrics-access.
const (
	Open     = "open"     // every client
	Loopback = "loopback" // clients connected from this host
	Admin    = "admin"    // the admin role
)

// Allow is the check Serve applies for access: nil for Open, the
// client's address for Loopback, admin (whether the client has the admin
// role, as the server authenticates it) for Admin.
func Allow(access string, admin func(*http.Request) error) (func(*http.Request) error, error) {
	switch access {
	case Open:
		return nil, nil
	case Loopback:
		return fromThisHost, nil
	case Admin:
		return admin, nil
	}
	return nil, fmt.Errorf("--metrics-access %q: want %s, %s or %s", access, Open, Loopback, Admin)
}

// fromThisHost refuses clients not connected from a loopback address.
func fromThisHost(r *http.Request) error {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return kerr.New(kerr.Permission, r.Method, Path, "served to clients on this host only (--metrics-access)")
}

// gauge and counter build constant metrics for collectors.
func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}
