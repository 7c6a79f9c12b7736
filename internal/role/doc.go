// Package role assembles Kaon's server roles from their settings: the one
// place the namespace service, its HTTP and root:// front ends, its
// metrics and (replicated) its HA incarnations, and a storage server with
// its data endpoints are wired together. `kaon up`, `kaon mgm` and
// `kaon fst` (cmd/kaon: flags, config files, dispatch) start roles with
// StartUp, StartMGM and StartFST; internal/kaontest builds its in-process
// stack from the same NewNamespace and NewStorage, so tests exercise the
// binary's wiring.
//
// Layers, bottom up:
//
//	config.go     one settings struct per group (Common, Listen, Namespace,
//	              Storage, Join, Auth, Security, Meta) and per role, with defaults
//	namespace.go  NewNamespace: service + HTTP endpoint + root:// binding + metrics
//	storage.go    NewStorage: storage server + data endpoint + metrics
//	ha.go         a replicated namespace server: one Namespace per incarnation
//	              behind the HA gate; member.go runs an etcd member inside it
//	serve.go      listeners, TLS, endpoints: StartUp, StartMGM, StartFST
package role
