package metrics

import "github.com/prometheus/client_golang/prometheus"

// Movement is how drain, balance and layout conversion report progress:
// vectors registered on the namespace server's registry, labelled with
// the kind of movement ("drain", "balance", "conversion") and the
// filesystem moved from ("" for a conversion). Their code sets them; a
// nil *Movement (no metrics) is valid and ignores every call.
type Movement struct {
	Files     *prometheus.CounterVec // kaon_move_files_total{kind,fsid,result}: files (stripes) moved, by result (done, failed)
	Bytes     *prometheus.CounterVec // kaon_move_bytes_total{kind,fsid}: bytes moved
	Remaining *prometheus.GaugeVec   // kaon_move_files_remaining{kind,fsid}: files left to move
	BytesLeft *prometheus.GaugeVec   // kaon_move_bytes_remaining{kind,fsid}: bytes left to move
	Running   *prometheus.GaugeVec   // kaon_move_running{kind,fsid}: 1 while it runs
}

// NewMovement registers the movement vectors on reg.
func NewMovement(reg prometheus.Registerer) *Movement {
	m := &Movement{
		Files: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaon_move_files_total",
			Help: "Files moved by drain, balance or conversion, by result."}, []string{"kind", "fsid", "result"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaon_move_bytes_total",
			Help: "Bytes moved by drain, balance or conversion."}, []string{"kind", "fsid"}),
		Remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kaon_move_files_remaining",
			Help: "Files left to move."}, []string{"kind", "fsid"}),
		BytesLeft: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kaon_move_bytes_remaining",
			Help: "Bytes left to move."}, []string{"kind", "fsid"}),
		Running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kaon_move_running",
			Help: "1 while a drain, balance or conversion runs."}, []string{"kind", "fsid"}),
	}
	reg.MustRegister(m.Files, m.Bytes, m.Remaining, m.BytesLeft, m.Running)
	return m
}

// Progress sets where a movement stands: files and bytes left, whether
// it runs.
func (m *Movement) Progress(kind, fsid string, filesLeft, bytesLeft int64, running bool) {
	if m == nil {
		return
	}
	m.Remaining.WithLabelValues(kind, fsid).Set(float64(filesLeft))
	m.BytesLeft.WithLabelValues(kind, fsid).Set(float64(bytesLeft))
	r := 0.0
	if running {
		r = 1
	}
	m.Running.WithLabelValues(kind, fsid).Set(r)
}

// Moved counts one file moved (ok) or not, and its bytes.
func (m *Movement) Moved(kind, fsid string, bytes int64, ok bool) {
	if m == nil {
		return
	}
	result := "done"
	if !ok {
		result = "failed"
	}
	m.Files.WithLabelValues(kind, fsid, result).Inc()
	if ok {
		m.Bytes.WithLabelValues(kind, fsid).Add(float64(bytes))
	}
}
