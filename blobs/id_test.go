package blobs_test

import (
	"testing"

	"github.com/acyclicfs/acyclicfs/blobs"
)

// IDs are persistent addresses: these are the IDs stores made before the
// blob plane was its own package (store.BlobID, store.SparseBlobID).
func TestIDsArePinned(t *testing.T) {
	c := make([]byte, 3*4096+10)
	c[5000] = 7
	c[len(c)-1] = 1
	for _, tc := range []struct {
		name string
		got  blobs.ID
		want string
	}{
		{"dense hello", blobs.Sum([]byte("hello")), "84ad05cae63708ba4d8a3c51586310325aa60233f7b513d97fb7cff0386f0de1"},
		{"sparse", blobs.SparseSum(c), "245196d13c7d95fc32c34b289f29555124d5a1431baf897ed27d74d6209afe52"},
		{"dense", blobs.Sum(c), "77ae48844fc770370fccf3509f6f2948181bdd83ef9ba6a681a67080c46aa76a"},
	} {
		if tc.got.String() != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, tc.got, tc.want)
		}
	}
}
