// Package srr is WLCG Storage Resource Reporting: the JSON document
// (schema "Storage Resource Reporting", storageservice with its endpoints
// and shares) that WLCG accounting and Rucio read from a storage
// endpoint, by default at /.well-known/srr.json. Kaon reports one share
// per space (its disks' capacity and use) and one per project quota node
// (its byte limit and use, the node's path).
package srr

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sort"
	"time"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// DefaultPath is where the HTTP front serves the document (--srr-path).
const DefaultPath = "/.well-known/srr.json"

// Document is an SRR record.
type Document struct {
	StorageService Service `json:"storageservice"`
}

// Service is the storage service.
type Service struct {
	Name                  string     `json:"name"`
	ID                    string     `json:"id"`
	ServiceType           string     `json:"servicetype"`
	Implementation        string     `json:"implementation"`
	ImplementationVersion string     `json:"implementationversion"`
	QualityLevel          string     `json:"qualitylevel"`
	LatestUpdate          int64      `json:"latestupdate"` // Unix seconds
	Endpoints             []Endpoint `json:"storageendpoints"`
	Shares                []Share    `json:"storageshares"`
}

// Endpoint is one protocol endpoint.
type Endpoint struct {
	Name             string   `json:"name"`
	InterfaceType    string   `json:"interfacetype"` // https, http, root
	InterfaceVersion string   `json:"interfaceversion"`
	EndpointURL      string   `json:"endpointurl"`
	AssignedShares   []string `json:"assignedshares"`
}

// Share is one accounted part of the storage.
type Share struct {
	Name              string   `json:"name"`
	TotalSize         int64    `json:"totalsize"` // bytes
	UsedSize          int64    `json:"usedsize"`  // bytes
	Timestamp         int64    `json:"timestamp"` // Unix seconds
	VOs               []string `json:"vos"`
	AssignedEndpoints []string `json:"assignedendpoints"`
	Path              []string `json:"path,omitempty"`
	ServingState      string   `json:"servingstate"`
}

// Input is what a document is built from.
type Input struct {
	Name      string // the service's name (the host clients reach)
	Endpoints []Endpoint
	Spaces    []nsapi.Space
	Quotas    []nsapi.Quota // project limits are reported, others ignored
	Now       time.Time
}

// Build makes the document of in.
func Build(in Input) Document {
	now := in.Now.Unix()
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	s := Service{Name: in.Name, ID: in.Name, ServiceType: "disk", Implementation: "kaon", ImplementationVersion: version,
		QualityLevel: "production", LatestUpdate: now, Endpoints: in.Endpoints, Shares: []Share{}}
	if s.Endpoints == nil {
		s.Endpoints = []Endpoint{}
	}
	for _, sp := range in.Spaces {
		s.Shares = append(s.Shares, Share{Name: "space:" + sp.Name, TotalSize: int64(sp.Capacity), UsedSize: int64(sp.Used),
			Timestamp: now, VOs: []string{}, AssignedEndpoints: []string{"all"}, ServingState: "open"})
	}
	var projects []Share
	for _, q := range in.Quotas {
		if q.Kind != nsapi.QuotaProject {
			continue
		}
		projects = append(projects, Share{Name: "quota:" + q.Path, TotalSize: q.LimitBytes, UsedSize: q.UsedBytes,
			Timestamp: now, VOs: []string{}, AssignedEndpoints: []string{"all"}, Path: []string{q.Path}, ServingState: "open"})
	}
	sort.Slice(projects, func(i, j int) bool { return projects[i].Name < projects[j].Name })
	s.Shares = append(s.Shares, projects...)
	for i := range s.Endpoints {
		if s.Endpoints[i].AssignedShares == nil {
			s.Endpoints[i].AssignedShares = []string{"all"}
		}
	}
	return Document{StorageService: s}
}

// required are the fields the WLCG SRR schema requires of each object.
var required = map[string][]string{
	"storageservice":   {"name", "implementation", "implementationversion", "latestupdate", "storageendpoints", "storageshares"},
	"storageendpoints": {"name", "interfacetype", "interfaceversion", "endpointurl", "assignedshares"},
	"storageshares":    {"name", "totalsize", "usedsize", "timestamp", "vos", "assignedendpoints"},
}

// Validate checks a document (as served) for the fields the WLCG SRR
// schema requires, and that sizes and timestamps are non-negative
// integers: the check a consumer's schema validation makes.
func Validate(doc []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return fmt.Errorf("srr: not a JSON object: %w", err)
	}
	var svc map[string]json.RawMessage
	if err := json.Unmarshal(top["storageservice"], &svc); err != nil || svc == nil {
		return fmt.Errorf("srr: no storageservice object")
	}
	if err := has("storageservice", svc); err != nil {
		return err
	}
	for _, list := range []string{"storageendpoints", "storageshares"} {
		var items []map[string]json.RawMessage
		if err := json.Unmarshal(svc[list], &items); err != nil {
			return fmt.Errorf("srr: storageservice.%s is not an array of objects", list)
		}
		for i, it := range items {
			if err := has(fmt.Sprintf("%s[%d]", list, i), it); err != nil {
				return err
			}
			if list != "storageshares" {
				continue
			}
			for _, f := range []string{"totalsize", "usedsize", "timestamp"} {
				var n int64
				if err := json.Unmarshal(it[f], &n); err != nil || n < 0 {
					return fmt.Errorf("srr: storageshares[%d].%s is %s, want a non-negative integer", i, f, it[f])
				}
			}
		}
	}
	var ts int64
	if err := json.Unmarshal(svc["latestupdate"], &ts); err != nil || ts <= 0 {
		return fmt.Errorf("srr: storageservice.latestupdate is %s, want Unix seconds", svc["latestupdate"])
	}
	return nil
}

func has(what string, obj map[string]json.RawMessage) error {
	key := what
	if i := len(what) - 1; what[i] == ']' {
		for j := range what {
			if what[j] == '[' {
				key = what[:j]
				break
			}
		}
	}
	for _, f := range required[key] {
		if v, ok := obj[f]; !ok || string(v) == "null" {
			return fmt.Errorf("srr: %s lacks the required field %q", what, f)
		}
	}
	return nil
}
