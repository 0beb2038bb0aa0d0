package store_test

import (
	"testing"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

// TestConformanceEtcdPlane runs the suite on stores whose metadata is on
// the etcd plane (a 3-member cluster in the test process, one prefix per
// case) and whose blobs are in the local directory.
func TestConformanceEtcdPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd cluster")
	}
	cl := etcdtest.Start(t).Client()
	storetest.Run(t, func(t *testing.T, opt store.Options) *store.Store {
		opt.Meta = etcdmeta.NewWithOptions(cl, "store/"+t.Name(), etcdmeta.Options{RequestTimeout: etcdtest.RequestTimeout})
		return storetest.MustOpenWith(t, opt)
	})
}
