// Package httpfront is Kaon's HTTP front end: it authenticates clients,
// translates their requests into calls of the namespace service and of
// the storage server, and answers with the one HTTP mapping of Kaon's
// errors (kerr.HTTPStatus). It decides nothing itself.
//
// A namespace server's endpoint (Namespace, front.go; HA, ha.go, on a
// replicated instance) serves WebDAV (dav.go, third-party COPY in
// tpc.go), the admin JSON API under /api/v1/ (api.go: the route table;
// api_*.go: the routes of each family, in nsapi's vocabulary), the
// internal protocol under /internal/v1/ (package cluster) and the token
// issuer's public metadata (token.go). A storage server's endpoint
// (Storage, storage.go) serves the client data endpoint (data.go), where
// the namespace server sends clients with a capability, and the internal
// storage RPC. Requests are logged once each (accesslog.go); connections
// close lingering (linger.go).
package httpfront
