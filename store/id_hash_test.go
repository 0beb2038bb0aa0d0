package store

import (
	"bytes"
	"testing"

	"lukechampine.com/blake3"
)

// hashWithDomain's one-shot path for small inputs must give the digest of
// the streaming hasher: IDs are persistent addresses.
func TestHashWithDomainOneShotMatchesStreaming(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 200, 256 - len(domainBaseRef), 256 - len(domainBaseRef) + 1, 300, 5000} {
		payload := bytes.Repeat([]byte{byte(n)}, n)
		h := blake3.New(IDSize, nil)
		h.Write([]byte(domainBaseRef))
		h.Write(payload)
		var want ID
		h.Sum(want[:0])
		if got := hashWithDomain(domainBaseRef, payload); got != want {
			t.Fatalf("payload of %d bytes: one-shot %s, streaming %s", n, got.Short(), want.Short())
		}
	}
}
