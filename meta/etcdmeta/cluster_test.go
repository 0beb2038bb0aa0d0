package etcdmeta_test

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// cluster is a 3-member etcd cluster inside the test process, on
// 127.0.0.1 ports picked free, with its data in t.TempDir; t.Cleanup stops
// every member (and every client made by client).
type cluster struct {
	t       testing.TB
	cfgs    []*embed.Config
	members []*embed.Etcd // nil while a member is stopped
}

// freeURL returns http://127.0.0.1:PORT for a port that was free a moment
// ago (the kernel picked it).
func freeURL(t testing.TB) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

func startCluster(t testing.TB) *cluster {
	t.Helper()
	const n = 3
	c := &cluster{t: t}
	var initial []string
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = t.TempDir()
		peer, client := freeURL(t), freeURL(t)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.InitialClusterToken = "etcdmeta-test"
		cfg.LogLevel = "error"
		cfg.UnsafeNoFsync = true // test data: losing it on a crash is fine
		initial = append(initial, cfg.Name+"="+peer.String())
		c.cfgs = append(c.cfgs, cfg)
	}
	c.members = make([]*embed.Etcd, n)
	t.Cleanup(func() {
		for i := range c.members {
			c.stop(i)
		}
	})
	for i, cfg := range c.cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatalf("start member %d: %v", i, err)
		}
		c.members[i] = e
	}
	for i := range c.members {
		c.ready(i)
	}
	return c
}

// ready waits until member i serves clients.
func (c *cluster) ready(i int) {
	c.t.Helper()
	select {
	case <-c.members[i].Server.ReadyNotify():
	case err := <-c.members[i].Err():
		c.t.Fatalf("member %d: %v", i, err)
	case <-time.After(30 * time.Second):
		c.t.Fatalf("member %d not ready after 30s", i)
	}
}

// stop stops member i (its data stays for restart).
func (c *cluster) stop(i int) {
	if e := c.members[i]; e != nil {
		e.Close()
		c.members[i] = nil
	}
}

// restart starts member i again from its data directory.
func (c *cluster) restart(i int) {
	c.t.Helper()
	c.cfgs[i].ClusterState = embed.ClusterStateFlagExisting
	e, err := embed.StartEtcd(c.cfgs[i])
	if err != nil {
		c.t.Fatalf("restart member %d: %v", i, err)
	}
	c.members[i] = e
	c.ready(i)
}

// leader returns the index of the member that leads (one that is
// running), -1 if none knows.
func (c *cluster) leader() int {
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

// client connects to the given members (all if none given).
func (c *cluster) client(members ...int) *clientv3.Client {
	c.t.Helper()
	if len(members) == 0 {
		members = []int{0, 1, 2}
	}
	var eps []string
	for _, i := range members {
		eps = append(eps, c.cfgs[i].AdvertiseClientUrls[0].String())
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}
