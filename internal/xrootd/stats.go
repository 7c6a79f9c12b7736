package xrootd

// Counters are a server's totals since it started (for metrics).
type Counters struct {
	Connections int64 // open now
	Requests    int64
	Errors      int64 // requests answered with an error
	Redirects   int64
	BytesIn     int64
	BytesOut    int64
}

// Counters returns the server's totals.
func (s *Server) Counters() Counters {
	return Counters{Connections: s.nConns.Load(), Requests: s.nReqs.Load(), Errors: s.nErrs.Load(), Redirects: s.nRedirs.Load(),
		BytesIn: s.bytesIn.Load(), BytesOut: s.bytesOut.Load()}
}
