package nsapi

import "time"

// NSStatus is `kaon ns status`: the namespace's engine and its servers,
// as the server asked sees them (every server of a replicated instance
// answers it, standbys too).
type NSStatus struct {
	Engine  NSEngine   `json:"engine"`
	Active  string     `json:"active,omitempty"` // URL of the active namespace server ("" while none)
	Servers []NSServer `json:"servers"`
	Self    string     `json:"self"`            // URL of the server that answered
	Error   string     `json:"error,omitempty"` // why the list of servers is incomplete
}

// NSEngine is the store of the namespace.
type NSEngine struct {
	Name     string           `json:"name"`               // pebble, etcd
	Revision uint64           `json:"revision,omitempty"` // last committed revision
	Members  []NSEngineMember `json:"members,omitempty"`
}

// NSEngineMember is one member of a replicated engine (an etcd member).
type NSEngineMember struct {
	Name     string `json:"name,omitempty"`
	Endpoint string `json:"endpoint"`
	Healthy  bool   `json:"healthy"`
	Leader   bool   `json:"leader,omitempty"`
	Version  string `json:"version,omitempty"`
	DBSize   int64  `json:"dbsize,omitempty"`
	DBInUse  int64  `json:"dbinuse,omitempty"`
	Error    string `json:"error,omitempty"`
}

// NSServer is one namespace server.
type NSServer struct {
	ID        string    `json:"id"`
	HTTP      string    `json:"http"`
	XRootD    string    `json:"xrootd,omitempty"`
	Role      string    `json:"role"` // active, standby, starting
	Since     time.Time `json:"since"`
	Applied   uint64    `json:"applied,omitempty"`   // revision its replica is at
	Committed uint64    `json:"committed,omitempty"` // active: revision of its last commit
	Updated   time.Time `json:"updated"`             // when it last reported
	Error     string    `json:"error,omitempty"`
}

// Refusal is a request the namespace service refused (permission,
// expiry, quota): the admin's status page lists the latest.
type Refusal struct {
	Time     time.Time `json:"time"`
	User     string    `json:"user"`
	Method   string    `json:"method"`
	Protocol string    `json:"protocol"`
	Op       string    `json:"op"`
	Path     string    `json:"path"`
	Reason   string    `json:"reason"`
}
