// Package endpoints is DATA/endpoints.json, where a running Kaon server
// role announces the URLs it serves once it serves them: the CLI finds
// the local instance through it, scripts and the integration harness wait
// for it. A leaf package, so readers need not link the servers.
package endpoints

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// File is the file's name in the data directory.
const File = "endpoints.json"

// Endpoints is the content of DIR/endpoints.json.
type Endpoints struct {
	HTTP    string `json:"http"`
	XRootD  string `json:"xrootd,omitempty"`
	FSTHTTP string `json:"fst_http,omitempty"`
	FSTXrd  string `json:"fst_xrootd,omitempty"`
	// With --tls: the TLS URLs and the CA clients verify them with.
	HTTPS    string `json:"https,omitempty"`
	Roots    string `json:"roots,omitempty"`
	FSTHTTPS string `json:"fst_https,omitempty"`
	FSTRoots string `json:"fst_roots,omitempty"`
	CA       string `json:"ca,omitempty"`     // the certificate of the CA that signed the host certificate
	CADir    string `json:"ca_dir,omitempty"` // trusted CAs, hashed layout
	PID      int    `json:"pid"`
}

// Write writes e as dir/endpoints.json of this process (atomically: a
// reader sees the old file or the whole new one).
func Write(dir string, e Endpoints) error {
	e.PID = os.Getpid()
	b, _ := json.MarshalIndent(e, "", "  ")
	tmp := filepath.Join(dir, "."+File+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, File))
}

// Read reads dir/endpoints.json.
func Read(dir string) (Endpoints, error) {
	var e Endpoints
	b, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		return e, err
	}
	err = json.Unmarshal(b, &e)
	return e, err
}

// Remove removes dir/endpoints.json (a server that stopped serves none).
func Remove(dir string) error { return os.Remove(filepath.Join(dir, File)) }
