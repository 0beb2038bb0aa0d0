// Package pathino computes the inode numbers a mount reports for paths
// (docs/design.md "Inode numbers"): a hash of the path from the mount's
// root, the same in every mount of every workspace that holds a file at
// that path. fusefs numbers its inodes with it; the git index that
// `create --from-git` writes records the same numbers, so that git finds
// the index's stat data equal to what the mount reports.
package pathino

import (
	"encoding/binary"
	"strings"
)

const (
	// StableBit is set in every path-derived number; they lie in
	// [2^61, 2^62).
	StableBit = 1 << 61
	// StableMask keeps the bits of a path hash a number uses.
	StableMask = StableBit - 1
	// RootHash is the path hash of a mount's root ("acyclicfs").
	RootHash = 0x6163796c69636673
)

// Child is the path hash of name in a directory whose path hash is
// parent: FNV-1a over the parent's hash and the name, then a finalizer
// (splitmix64) so that similar paths spread over the whole range.
func Child(parent uint64, name string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], parent)
	for _, c := range b {
		h = (h ^ uint64(c)) * prime
	}
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// Number is the inode number a path hash gives.
func Number(pathHash uint64) uint64 { return pathHash&StableMask | StableBit }

// Of returns the inode number a mount reports for the slash-separated
// path p relative to its root (no leading slash; "" is the root, 1), when
// no other live inode of the mount already holds that number.
func Of(p string) uint64 {
	if p == "" {
		return 1
	}
	h := uint64(RootHash)
	for name := range strings.SplitSeq(p, "/") {
		h = Child(h, name)
	}
	return Number(h)
}
