// Package etcdtest starts etcd clusters inside a test process: members on
// 127.0.0.1 ports reserved by internal/testport (outside the ephemeral
// range, locked across the test processes of a run; a start that still
// cannot bind is retried on fresh ports), data in t.TempDir, fsync off, logs at
// error level. t.Cleanup stops every member and closes every client made
// through Client, so no process or port outlives a test. Only tests import
// it: it pulls in etcd's server module, which the binary must not hold.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/acyclicfs/acyclicfs/internal/testport"
)

// RequestTimeout bounds each request of a plane a test makes on a
// cluster (etcdmeta.Options.RequestTimeout): a cluster that lost its
// quorum fails the test with "etcd did not answer" instead of hanging it
// until go test's timeout.
const RequestTimeout = 30 * time.Second

// Cluster is a 3-member etcd cluster inside the test process, on
// 127.0.0.1 ports testport reserved, with its data in t.TempDir; t.Cleanup stops
// every member (and every client made by client).
type Cluster struct {
	t       testing.TB
	cfgs    []*embed.Config
	members []*embed.Etcd // nil while a member is stopped
}

// freeURL returns http://127.0.0.1:PORT for a port testport reserved for
// the rest of the test.
func freeURL(t testing.TB) url.URL {
	t.Helper()
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(testport.One(t)))}
}

// Start starts a 3-member cluster and waits until every member serves.
// A start that cannot bind a port (taken by a process outside testport's
// reservations) is retried on fresh ports, up to three times, and logged.
func Start(t testing.TB) *Cluster {
	t.Helper()
	const attempts = 3
	for i := 1; ; i++ {
		c, err := start(t)
		if err == nil {
			return c
		}
		if !testport.BindFailed(err.Error()) || i == attempts {
			t.Fatalf("etcd cluster (start %d of %d): %v", i, attempts, err)
		}
		t.Logf("etcd cluster: start %d of %d could not bind its ports (%v); retrying on fresh ports", i, attempts, err)
	}
}

func start(t testing.TB) (*Cluster, error) {
	t.Helper()
	const n = 3
	c := &Cluster{t: t}
	var initial []string
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = t.TempDir()
		peer, client := freeURL(t), freeURL(t)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.InitialClusterToken = "etcdtest"
		cfg.LogLevel = "error"
		cfg.UnsafeNoFsync = true // test data: losing it on a crash is fine
		initial = append(initial, cfg.Name+"="+peer.String())
		c.cfgs = append(c.cfgs, cfg)
	}
	c.members = make([]*embed.Etcd, n)
	stopAll := func() {
		for i := range c.members {
			c.Stop(i)
		}
	}
	for i, cfg := range c.cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("start member %d: %w", i, err)
		}
		c.members[i] = e
	}
	t.Cleanup(stopAll)
	for i := range c.members {
		c.Ready(i)
	}
	return c, nil
}

// Ready waits until member i serves clients.
func (c *Cluster) Ready(i int) {
	c.t.Helper()
	select {
	case <-c.members[i].Server.ReadyNotify():
	case err := <-c.members[i].Err():
		c.t.Fatalf("member %d: %v", i, err)
	case <-time.After(30 * time.Second):
		c.t.Fatalf("member %d not ready after 30s", i)
	}
}

// Stop stops member i (its data stays for restart).
func (c *Cluster) Stop(i int) {
	if e := c.members[i]; e != nil {
		e.Close()
		c.members[i] = nil
	}
}

// Restart starts member i again from its data directory.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.cfgs[i].ClusterState = embed.ClusterStateFlagExisting
	e, err := embed.StartEtcd(c.cfgs[i])
	if err != nil {
		c.t.Fatalf("restart member %d: %v", i, err)
	}
	c.members[i] = e
	c.Ready(i)
}

// Leader returns the index of the member that leads (one that is
// running), -1 if none knows.
func (c *Cluster) Leader() int {
	for _, e := range c.members {
		if e == nil {
			continue
		}
		lead := e.Server.Leader()
		for j, f := range c.members {
			if f != nil && f.Server.MemberID() == lead {
				return j
			}
		}
	}
	return -1
}

// Endpoints returns the client URLs of the given members (all if none
// given), as a client's Endpoints want them.
func (c *Cluster) Endpoints(members ...int) []string {
	if len(members) == 0 {
		members = []int{0, 1, 2}
	}
	var eps []string
	for _, i := range members {
		eps = append(eps, c.cfgs[i].AdvertiseClientUrls[0].String())
	}
	return eps
}

// Client connects to the given members (all if none given).
func (c *Cluster) Client(members ...int) *clientv3.Client {
	c.t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(members...), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}
