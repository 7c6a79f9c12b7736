// Package nsapi is the namespace service's vocabulary as its clients see
// it: the path grammar, entries and their attributes, the sys.* attribute
// names, opening a file (OpenRequest, Grant), removal options, quota keys
// and amounts, change events, and the requests and answers of every route
// of the admin API (/api/v1/...) with their JSON form.
//
// It is a leaf (it imports kerr only), so everything that speaks to the
// service can share it without the model: the service itself (nsserver,
// which converts the model's records into these types at its boundary),
// both front ends (httpfront, xrdfront), the Go client (client), the CLI
// and the mounts. The JSON types are the admin API's wire format: fields
// are only added, never renamed or removed.
//
// Files: path.go (path grammar), attr.go (sys.* names), entry.go
// (entries, opening, removal, statfs), quota.go, event.go (change
// events), fleet.go (filesystems, spaces, groups, data movement), fsck.go,
// access.go (who a client is, tokens), rules.go (access rules,
// clients), status.go (ns status), wire.go
// (errors, request arguments, encodings), requests.go (one request type
// per admin route).
package nsapi
