// Package datafront is a storage server's HTTP front end, beside
// httpfront (the namespace server's): the client data endpoint (data.go),
// where the namespace server redirects clients with a capability, which
// verifies the capability and streams the bytes through package storage;
// HTTP third-party copies run there (tpc.go). Storage serves it with the
// internal storage RPC (package cluster) on one listener. It decides
// nothing itself: the capability says what the client may do.
package datafront
