package window_test

import (
	"testing"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/window/windowtest"
)

// TestMetaStoreOnEtcdConformance: the window store, gates included, on the
// etcd metadata plane (a 3-member cluster in the test process), every
// case in its own prefix.
func TestMetaStoreOnEtcdConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd cluster")
	}
	cl := etcdtest.Start(t).Client()
	windowtest.Run(t, func(t *testing.T) windowtest.Env {
		clock := window.NewManualClock(windowtest.Start)
		plane := etcdmeta.NewWithOptions(cl, "windows/"+t.Name(), etcdmeta.Options{RequestTimeout: etcdtest.RequestTimeout})
		st := window.NewMetaStore(plane, clock)
		return windowtest.Env{Store: st, Clock: clock, PutRaw: planePutRaw(plane), CheckPermit: st.CheckPermit}
	})
}
