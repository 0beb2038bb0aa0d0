package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/blobs/s3blobs"
	"github.com/acyclicfs/acyclicfs/internal/lockfile"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"github.com/acyclicfs/acyclicfs/store"
)

// DialTimeout bounds how long opening a node waits for etcd to answer.
const DialTimeout = 5 * time.Second

// LockName is the node's lock file in the store directory: one process
// (the daemon, or a command run without one) opens a node at a time, as
// meta.db's lock makes it for a local store.
const LockName = "node.lock"

// lockWait bounds the wait for the node lock (store.Options.LockTimeout's
// default).
const lockWait = 2 * time.Second

// Node is an open node: its configuration, its etcd client and the
// metadata plane on it.
type Node struct {
	cfg  Config
	dir  string
	c    *clientv3.Client
	conn *Conn
	lock *lockfile.Lock
	meta meta.Store
	blob blobs.Store // the shared blob plane (Config.Blobs), nil without one
	// claims are the node's claims (the latest Claims made), which
	// HeadGuard consults; nil until then.
	claims atomic.Pointer[Claims]
}

// Open opens dir as a node if it has a cluster.json: it connects to etcd,
// checking within DialTimeout that a quorum answers (ErrUnreachable
// naming the endpoints), then takes the node lock (an error wrapping
// store.ErrLocked when another process holds it for 2s, or, while some
// member does not answer, for RequestTimeout more: the error then names
// them). It returns nil, nil for a local store.
func Open(ctx context.Context, dir string) (*Node, error) {
	cfg, found, err := Load(dir)
	if err != nil || !found {
		return nil, err
	}
	// etcd first: a command that cannot reach it says so, not that the
	// store is locked by a process that waits on it too.
	conn, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	lock := lockfile.New(filepath.Join(dir, LockName), os.O_RDONLY|os.O_CREATE)
	if err := lock.Wait(ctx, lockfile.Exclusive, lockWait, 20*time.Millisecond); err != nil {
		slow := conn.Slow()
		if errors.Is(err, lockfile.ErrHeld) && len(slow) > 0 {
			// The holder most likely waits on the members that do not
			// answer: give it its requests' time.
			err = lock.Wait(ctx, lockfile.Exclusive, RequestTimeout, 20*time.Millisecond)
		}
		if err != nil {
			conn.Close()
			switch {
			case errors.Is(err, lockfile.ErrHeld) && len(slow) > 0:
				return nil, fmt.Errorf("open node %s: %w, which waits on etcd: %s did not answer within %v", dir, store.ErrLocked, strings.Join(slow, ","), probeTimeout)
			case errors.Is(err, lockfile.ErrHeld):
				return nil, fmt.Errorf("open node %s: %w", dir, store.ErrLocked)
			}
			return nil, fmt.Errorf("open node %s: %w", dir, err)
		}
	}
	remote, err := OpenBlobs(ctx, dir, cfg, false)
	if err != nil {
		lock.Unlock()
		conn.Close()
		return nil, fmt.Errorf("node %s: %w", dir, err)
	}
	c := conn.Client
	// The lease gates' session lives as long as the claims' lease: a node
	// stopped past its claim TTL has lost both its claims and its gates
	// (docs/scale-out.md "Failure model").
	// Every metadata transaction is bounded (RequestTimeout): a command
	// that loses etcd's quorum midway fails naming etcd, not hangs.
	plane := etcdmeta.NewWithOptions(c, cfg.Prefix, etcdmeta.Options{SessionTTL: cfg.ClaimTTL(), RequestTimeout: RequestTimeout,
		ReadAttempt: ReadAttempt, KeyCompared: []meta.Space{ClaimSpace}})
	return &Node{cfg: cfg, dir: dir, c: c, conn: conn, lock: lock, meta: plane, blob: remote}, nil
}

// OpenBlobs opens cfg's shared blob plane for the node at dir: nil
// without one, the shared directory, or the S3 bucket (credentials from
// the standard AWS environment variables; puts spool in dir/tmp). With
// create, a missing bucket is made (init); otherwise it is an error. An
// S3 server that does not answer is an error wrapping
// blobs.ErrUnavailable.
func OpenBlobs(ctx context.Context, dir string, cfg Config, create bool) (blobs.Store, error) {
	switch {
	case cfg.Blobs == "":
		return nil, nil
	case strings.HasPrefix(cfg.Blobs, "s3://"):
		spec, err := s3blobs.ParseSpec(cfg.Blobs)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
		opt := s3blobs.Options{CreateBucket: create}
		if fi, err := os.Stat(filepath.Join(dir, "tmp")); err == nil && fi.IsDir() {
			opt.TempDir = filepath.Join(dir, "tmp")
		}
		ctx, cancel := context.WithTimeout(ctx, DialTimeout)
		defer cancel()
		s, err := s3blobs.OpenSpec(ctx, spec, opt)
		if err != nil {
			return nil, fmt.Errorf("blobs: %w", err)
		}
		return s, nil
	default:
		d, err := blobs.OpenShared(cfg.Blobs, blobs.Options{})
		if err != nil {
			return nil, fmt.Errorf("blobs: %w", err)
		}
		return d, nil
	}
}

// RequestTimeout bounds each metadata transaction of a node on etcd
// (etcdmeta.Options.RequestTimeout): a transaction is a few round trips,
// so this is only reached without a quorum.
const RequestTimeout = 10 * time.Second

// ReadAttempt bounds each attempt of a metadata read of a node
// (etcdmeta.Options.ReadAttempt): a read that a member which hangs holds
// goes to another member after this long.
const ReadAttempt = 2 * time.Second

// Remote returns the shared blob plane the node's store keeps its objects
// on (store.Options.Remote), nil when blobs stay on each node.
func (n *Node) Remote() blobs.Store { return n.blob }

// Dial connects to cfg's etcd and checks that a quorum answers within
// DialTimeout: the members that answer a probe first (Conn) are the
// client's endpoints, so a member that hangs (a stopped process keeps its
// connections open and answers nothing) costs at most probeTimeout here.
// ErrUnreachable when none answers, ErrAuth when etcd refuses the
// credentials, ErrBadConfig for a password or TLS file that cannot be
// read.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	return dial(ctx, cfg)
}

// Config returns the node's configuration.
func (n *Node) Config() Config { return n.cfg }

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Node }

// Meta returns the store's metadata plane on etcd.
func (n *Node) Meta() meta.Store { return n.meta }

// Client returns the node's etcd client (owned by the node).
func (n *Node) Client() *clientv3.Client { return n.c }

// Close closes the etcd client and releases the node lock.
func (n *Node) Close() error {
	err := n.conn.Close()
	n.lock.Unlock()
	return err
}
