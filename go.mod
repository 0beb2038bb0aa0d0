module github.com/acyclicfs/acyclicfs

go 1.26.0

require (
	github.com/gofrs/flock v0.13.2 // indirect
	github.com/hanwen/go-fuse/v2 v2.12.1 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/cpuid/v2 v2.0.9 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	lukechampine.com/blake3 v1.4.1 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
