// Package etcdtest starts etcd clusters inside a test process: members on
// 127.0.0.1 ports reserved by internal/testport (outside the ephemeral
// range, locked across the test processes of a run; a start that still
// cannot bind is retried on fresh ports), data in t.TempDir, fsync off, logs at
// error level. t.Cleanup stops every member and closes every client made
// through Client, so no process or port outlives a test. Only tests import
// it: it pulls in etcd's server module, which the binary must not hold.
//
// Options add what a member in another process would be tested with: a
// proxy in front of each member's client port that Pause turns into a
// stopped (SIGSTOPped) process, TLS with client certificates, and etcd's
// authentication.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
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
	opt     Options
	cfgs    []*embed.Config
	members []*embed.Etcd // nil while a member is stopped
	proxies []*proxy      // with Options.Proxy: one per member
	// TLS are the certificates of a cluster started with Options.TLS.
	TLS TLSFiles
}

// Options configure StartWith.
type Options struct {
	// Proxy puts a TCP proxy in front of each member's client port:
	// Endpoints name the proxies, and Pause(i) makes member i look stopped
	// to clients (its peers still reach it: the quorum stays).
	Proxy bool
	// TLS serves clients over TLS (https endpoints) and requires a client
	// certificate signed by the cluster's CA (Cluster.TLS).
	TLS bool
	// Auth enables etcd's authentication: user "root" (password
	// RootPassword) and user User (password Password) whose role may read
	// and write the keys starting with AuthPrefix (every key if empty).
	Auth       bool
	AuthPrefix string
}

// The users of a cluster started with Options.Auth.
const (
	User         = "acyclicfs"
	Password     = "s3cret pass"
	RootPassword = "root-pass"
)

// freeURL returns http://127.0.0.1:PORT for a port testport reserved for
// the rest of the test.
func freeURL(t testing.TB) url.URL {
	t.Helper()
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(testport.One(t)))}
}

// Start starts a 3-member cluster and waits until every member serves.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options. A start that cannot bind a port
// (taken by a process outside testport's reservations) is retried on
// fresh ports, up to three times, and logged.
func StartWith(t testing.TB, o Options) *Cluster {
	t.Helper()
	const attempts = 3
	for i := 1; ; i++ {
		c, err := start(t, o)
		if err == nil {
			return c
		}
		if !testport.BindFailed(err.Error()) || i == attempts {
			t.Fatalf("etcd cluster (start %d of %d): %v", i, attempts, err)
		}
		t.Logf("etcd cluster: start %d of %d could not bind its ports (%v); retrying on fresh ports", i, attempts, err)
	}
}

func start(t testing.TB, o Options) (*Cluster, error) {
	t.Helper()
	const n = 3
	c := &Cluster{t: t, opt: o}
	if o.TLS {
		c.TLS = makeTLS(t, t.TempDir())
	}
	var initial []string
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = t.TempDir()
		peer, client := freeURL(t), freeURL(t)
		if o.TLS {
			client.Scheme = "https"
			cfg.ClientTLSInfo = transport.TLSInfo{CertFile: c.TLS.ServerCert, KeyFile: c.TLS.ServerKey,
				TrustedCAFile: c.TLS.CA, ClientCertAuth: true}
		}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.InitialClusterToken = "etcdtest"
		cfg.LogLevel = "error"
		cfg.UnsafeNoFsync = true // test data: losing it on a crash is fine
		cfg.BcryptCost = 4       // bcrypt's least: passwords are checked in the test process, under -race
		initial = append(initial, cfg.Name+"="+peer.String())
		c.cfgs = append(c.cfgs, cfg)
	}
	c.members = make([]*embed.Etcd, n)
	stopAll := func() {
		for _, p := range c.proxies {
			p.close()
		}
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
	if o.Proxy {
		for _, cfg := range c.cfgs {
			c.proxies = append(c.proxies, newProxy(t, cfg.AdvertiseClientUrls[0].Host))
		}
	}
	if o.Auth {
		c.enableAuth()
	}
	return c, nil
}

// enableAuth adds the root user and User with a role on AuthPrefix, then
// turns authentication on.
func (c *Cluster) enableAuth() {
	c.t.Helper()
	cl := c.client("", "")
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key, end := "\x00", "\x00" // every key
	if c.opt.AuthPrefix != "" {
		key, end = c.opt.AuthPrefix, clientv3.GetPrefixRangeEnd(c.opt.AuthPrefix)
	}
	steps := []func() error{
		func() error { _, err := cl.UserAdd(ctx, "root", RootPassword); return err },
		func() error { _, err := cl.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cl.RoleAdd(ctx, User); return err },
		func() error {
			_, err := cl.RoleGrantPermission(ctx, User, key, end, clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cl.UserAdd(ctx, User, Password); return err },
		func() error { _, err := cl.UserGrantRole(ctx, User, User); return err },
		func() error { _, err := cl.AuthEnable(ctx); return err },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			c.t.Fatalf("enable etcd auth, step %d: %v", i, err)
		}
	}
}

// Pause makes member i look stopped to clients (Options.Proxy): its proxy
// accepts connections but forwards nothing until Resume.
func (c *Cluster) Pause(i int) { c.proxies[i].pause() }

// Resume undoes Pause.
func (c *Cluster) Resume(i int) { c.proxies[i].unpause() }

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
//
// A member that does not stop within stopLimit is left behind with a line
// in the test log naming it: embed's Close can wait for ever on a member
// that never joined its cluster (a start that failed half-way), and a
// test's cleanup must not hang the whole package until go test's timeout.
func (c *Cluster) Stop(i int) {
	e := c.members[i]
	if e == nil {
		return
	}
	c.members[i] = nil
	done := make(chan struct{})
	go func() {
		e.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopLimit):
		c.t.Logf("etcd member %d (%s) did not stop within %v; left behind", i, c.cfgs[i].Name, stopLimit)
	}
}

// stopLimit bounds the wait for one member to stop.
const stopLimit = 30 * time.Second

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
		u := c.cfgs[i].AdvertiseClientUrls[0]
		if c.proxies != nil {
			u.Host = c.proxies[i].addr()
		}
		eps = append(eps, u.String())
	}
	return eps
}

// Client connects to the given members (all if none given), as root on a
// cluster with authentication, with the client certificate on one with
// TLS.
func (c *Cluster) Client(members ...int) *clientv3.Client {
	c.t.Helper()
	user, pass := "", ""
	if c.opt.Auth {
		user, pass = "root", RootPassword
	}
	cl := c.client(user, pass, members...)
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func (c *Cluster) client(user, pass string, members ...int) *clientv3.Client {
	c.t.Helper()
	cfg := clientv3.Config{Endpoints: c.Endpoints(members...), DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		Username: user, Password: pass}
	if c.opt.TLS {
		tc, err := transport.TLSInfo{CertFile: c.TLS.ClientCert, KeyFile: c.TLS.ClientKey, TrustedCAFile: c.TLS.CA}.ClientConfig()
		if err != nil {
			c.t.Fatal(err)
		}
		cfg.TLS = tc
	}
	cl, err := clientv3.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}
