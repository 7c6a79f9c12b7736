module github.com/hanwen/go-fuse/v2

require (
	github.com/kylelemons/godebug v1.1.0
	github.com/moby/sys/mountinfo v0.7.2
	golang.org/x/sync v0.10.0
	golang.org/x/sys v0.28.0
)

require (
	github.com/rasky/go-xdr v0.0.0-20170124162913-1a41d1a06c93 // indirect
	github.com/willscott/go-nfs-client v0.0.0-20240104095149-b44639837b00
)

go 1.21
