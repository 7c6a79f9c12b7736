// Package httpfront is the HTTP front end of a namespace server: it
// authenticates clients, translates their requests into calls of the
// namespace service, and answers with the one HTTP mapping of Kaon's
// errors (kerr.HTTPStatus). It decides nothing itself.
//
// The namespace endpoint (Namespace, front.go; HA, ha.go, on a replicated
// instance) serves WebDAV (dav.go; third-party COPY authorized in
// copy.go), the admin JSON API under /api/v1/ (api.go: the route table;
// api_*.go: the routes of each family, in nsapi's vocabulary), the
// internal protocol under /internal/v1/ (package cluster), the token
// issuer's public metadata (token.go) and, for browsers, the web view
// (web.go: the service's answers rendered by package webview). Uploads and reads are answered
// with a redirect to a storage server's data endpoint (package
// datafront), where the bytes flow; what both endpoints share is in
// package httpserve.
package httpfront
