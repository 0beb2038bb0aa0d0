package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"github.com/acyclicfs/acyclicfs/store"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ClaimSpace is the metadata plane's namespace of the claims: a claim is
// the data key root "d" ClaimSpace.Key(WS) of etcdmeta's layout, so that a
// head append's transaction reads it through the plane and its Txn
// compares the claim's mod revision (HeadGuard). The claims are written by
// this package straight to etcd, bound to the claims session's lease, and
// never bump the namespace's guard: etcdmeta compares each read of this
// namespace key by key (etcdmeta.Options.KeyCompared).
var ClaimSpace = meta.NewSpace("cluster-claims")

// claimRoot is the etcd key prefix of every claim of prefix's store.
func claimRoot(prefix string) string {
	return etcdmeta.DataKey(prefix, ClaimSpace.Prefix(nil))
}

// Claim is the value of a claim key: which node mounts the workspace,
// where, since when.
type Claim struct {
	Workspace  string `json:"workspace"`
	Node       string `json:"node"`
	Mountpoint string `json:"mountpoint"`
	PID        int    `json:"pid"`
	Since      int64  `json:"since"` // Unix milliseconds
}

// ClaimedError is ErrClaimed with the claim that holds the workspace.
type ClaimedError struct{ Held Claim }

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("%s: %s is mounted on node %s at %s", ErrClaimed, e.Held.Workspace, e.Held.Node, e.Held.Mountpoint)
}

// Unwrap makes errors.Is(err, ErrClaimed) true.
func (e *ClaimedError) Unwrap() error { return ErrClaimed }

// errClosed: a claim asked for after Close (the daemon is exiting).
var errClosed = errors.New("claims closed: the daemon is exiting")

// Claims takes and releases a node's claims on one etcd session, created
// at the first claim and kept alive until Close. Safe for concurrent use.
type Claims struct {
	c    *clientv3.Client
	node string
	ttl  time.Duration
	root string // claimRoot(prefix): a claim key is root + WS
	pid  int
	logf func(format string, args ...any)
	held func() map[string]string     // the workspaces mounted here, by name: their mountpoints
	lost func(ws string, other Claim) // told of a workspace another node claimed meanwhile

	// revs is the revision of this node's latest put of each claim it
	// holds (dropped by Release), vals its value (what HeadGuard expects
	// to find); lostTo a claim another node made after it, while this
	// node's claim was gone (claimOn), kept until Release.
	rmu    sync.Mutex
	revs   map[string]int64
	vals   map[string][]byte
	lostTo map[string]Claim

	mu     sync.Mutex
	sess   *concurrency.Session // nil until the first claim, or after it was lost
	closed chan struct{}        // closed by Close
	once   sync.Once
}

// Claims returns the node's claims. held lists the workspaces this node
// mounts (name to mountpoint): when the session's lease is lost (the node
// was stopped or cut off from etcd past the TTL) they are claimed again on
// a new one, retried until etcd answers; a workspace another node claimed
// meanwhile is logged and reported to lost (if not nil), which fences this
// node's mount of it (daemon/fenced.go). logf is told of both.
func (n *Node) Claims(pid int, held func() map[string]string, lost func(ws string, other Claim), logf func(format string, args ...any)) *Claims {
	cl := &Claims{c: n.c, node: n.cfg.Node, ttl: n.cfg.ClaimTTL(), root: claimRoot(n.cfg.Prefix),
		pid: pid, held: held, lost: lost, logf: logf, closed: make(chan struct{}),
		revs: map[string]int64{}, vals: map[string][]byte{}, lostTo: map[string]Claim{}}
	n.claims.Store(cl)
	return cl
}

// List returns every claim of the store (every node's), by workspace.
func (n *Node) List(ctx context.Context) ([]Claim, error) {
	return listClaims(ctx, n.c, claimRoot(n.cfg.Prefix))
}

// Holder returns the claim on ws, if any node holds one.
func (n *Node) Holder(ctx context.Context, ws string) (Claim, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	resp, err := get(ctx, n.c, claimRoot(n.cfg.Prefix)+ws)
	if err != nil {
		return Claim{}, false, fmt.Errorf("claim on %s: %w", ws, noAnswer(ctx, err))
	}
	if len(resp.Kvs) == 0 {
		return Claim{}, false, nil
	}
	var cl Claim
	if err := json.Unmarshal(resp.Kvs[0].Value, &cl); err != nil {
		return cl, false, fmt.Errorf("claim on %s: %w: %w", ws, ErrBadConfig, err)
	}
	return cl, true, nil
}

func listClaims(ctx context.Context, c *clientv3.Client, root string) ([]Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	resp, err := get(ctx, c, root, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list claims: %w", noAnswer(ctx, err))
	}
	out := make([]Claim, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var cl Claim
		if err := json.Unmarshal(kv.Value, &cl); err != nil {
			return nil, fmt.Errorf("claim %q: %w: %w", kv.Key, ErrBadConfig, err)
		}
		out = append(out, cl)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workspace < out[j].Workspace })
	return out, nil
}

// session returns the live session, making one if there is none.
func (cl *Claims) session(ctx context.Context) (*concurrency.Session, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	select {
	case <-cl.closed:
		return nil, errClosed
	default:
	}
	if cl.sess != nil {
		select {
		case <-cl.sess.Done(): // lost: watchLoss claims again
			cl.sess = nil
		default:
			return cl.sess, nil
		}
	}
	// The grant is bounded by ctx (NewSession's own grant would run on
	// the keep-alive's context, which lives as long as the session).
	gctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	lease, err := attempt(gctx, func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
		return cl.c.Grant(ctx, int64(max(cl.ttl/time.Second, 1)))
	})
	if err != nil {
		return nil, fmt.Errorf("claims session: grant lease: %w", noAnswer(gctx, err))
	}
	s, err := concurrency.NewSession(cl.c, concurrency.WithLease(lease.ID), concurrency.WithContext(context.Background()))
	if err != nil {
		return nil, fmt.Errorf("claims session: %w", err)
	}
	cl.sess = s
	go cl.watchLoss(s)
	return s, nil
}

// watchLoss waits for s's lease to be lost other than by Close, then
// claims the mounted workspaces again (reclaim).
func (cl *Claims) watchLoss(s *concurrency.Session) {
	<-s.Done()
	cl.mu.Lock()
	if cl.sess == s {
		cl.sess = nil
	}
	cl.mu.Unlock()
	select {
	case <-cl.closed:
		return // Close revoked it
	default:
	}
	cl.logf("node %s: claims lease %x lost (stopped or cut off from etcd past its %v TTL): claiming the mounted workspaces again", cl.node, s.Lease(), cl.ttl)
	cl.reclaim()
}

// reclaimBackoff bounds the wait between two rounds of reclaim while etcd
// does not answer.
const reclaimBackoff = 5 * time.Second

// reclaim claims every workspace held() lists on a new session, retrying
// while etcd does not answer, until Close.
func (cl *Claims) reclaim() {
	wait := 100 * time.Millisecond
	for {
		select {
		case <-cl.closed:
			return
		default:
		}
		retry := false
		for ws, mp := range cl.held() {
			err := cl.Claim(context.Background(), ws, mp)
			var other *ClaimedError
			switch {
			case err == nil:
				cl.logf("node %s: %s claimed again", cl.node, ws)
			case errors.As(err, &other):
				cl.logf("node %s: %s is mounted here at %s and, since this node lost its claim, on node %s at %s: this node's mount is fenced (read-only, publishes nothing)", cl.node, ws, mp, other.Held.Node, other.Held.Mountpoint)
				if cl.lost != nil {
					cl.lost(ws, other.Held)
				}
			default:
				retry = true
				cl.logf("node %s: claim %s again: %v (retrying)", cl.node, ws, err)
			}
		}
		if !retry {
			return
		}
		select {
		case <-cl.closed:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, reclaimBackoff)
	}
}

// Claim claims ws for this node, mounted at mountpoint. It fails with a
// *ClaimedError (ErrClaimed) while another node holds it. A claim this
// node's earlier daemon left is taken over.
//
// It fails the same way when this node's claim on ws went (its lease was
// lost) and another node claimed ws meanwhile, even if that node has
// released it since: the workspace moved on without this node, which
// must not publish to it (daemon/fenced.go). That answer stands until
// Release.
func (cl *Claims) Claim(ctx context.Context, ws, mountpoint string) error {
	cl.rmu.Lock()
	other, lost := cl.lostTo[ws]
	cl.rmu.Unlock()
	if lost {
		return &ClaimedError{Held: other}
	}
	for attempt := 0; ; attempt++ {
		s, err := cl.session(ctx)
		if err != nil {
			return err
		}
		err = cl.claimOn(ctx, s, ws, mountpoint)
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) || attempt > 0 {
			return err
		}
		// The session's lease is gone (expired or revoked) before its
		// keep-alive noticed: drop it, claim on a new one.
		cl.mu.Lock()
		if cl.sess == s {
			cl.sess = nil
		}
		cl.mu.Unlock()
	}
}

// claimedBetween looks through the history of ws's claim key for a claim
// by another node in (after, upto): upto is the revision of this node's
// own put of the key, which the watch reports after everything before it.
// History compacted away counts as such a claim (nothing tells otherwise).
func (cl *Claims) claimedBetween(ctx context.Context, ws string, after, upto int64) (Claim, bool, error) {
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), DialTimeout)
	defer cancel()
	for resp := range cl.c.Watch(wctx, cl.root+ws, clientv3.WithRev(after+1)) {
		if err := resp.Err(); err != nil {
			if resp.CompactRevision > 0 {
				return Claim{Workspace: ws, Node: "(unknown: the claim's history was compacted)"}, true, nil
			}
			return Claim{}, false, fmt.Errorf("claim %s: history since revision %d: %w", ws, after, err)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision >= upto {
				return Claim{}, false, nil
			}
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			var c Claim
			if err := json.Unmarshal(ev.Kv.Value, &c); err != nil {
				return Claim{}, false, fmt.Errorf("claim %s at revision %d: %w: %w", ws, ev.Kv.ModRevision, ErrBadConfig, err)
			}
			if c.Node != cl.node {
				return c, true, nil
			}
		}
	}
	return Claim{}, false, fmt.Errorf("claim %s: history since revision %d: %w", ws, after, wctx.Err())
}

// claimed records this node's put of ws's claim at rev, after checking,
// if its earlier claim went without a Release, that no other node
// claimed ws in between. If one did, the put is undone and a
// *ClaimedError returned.
func (cl *Claims) claimed(ctx context.Context, ws string, rev int64, val []byte) error {
	cl.rmu.Lock()
	prev, had := cl.revs[ws]
	cl.rmu.Unlock()
	if had && prev < rev-1 {
		other, found, err := cl.claimedBetween(ctx, ws, prev, rev)
		if err != nil {
			return err
		}
		if found {
			key := cl.root + ws
			if _, err := cl.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit(); err != nil {
				return fmt.Errorf("claim %s: undo after finding node %s's claim: %w", ws, other.Node, err)
			}
			cl.rmu.Lock()
			cl.lostTo[ws] = other
			cl.rmu.Unlock()
			return &ClaimedError{Held: other}
		}
	}
	cl.rmu.Lock()
	cl.revs[ws] = rev
	cl.vals[ws] = val
	cl.rmu.Unlock()
	return nil
}

func (cl *Claims) claimOn(ctx context.Context, s *concurrency.Session, ws, mountpoint string) error {
	key := cl.root + ws
	val, err := json.Marshal(Claim{Workspace: ws, Node: cl.node, Mountpoint: mountpoint, PID: cl.pid, Since: time.Now().UnixMilli()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	for range 10 {
		resp, err := cl.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(s.Lease()))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return fmt.Errorf("claim %s: %w", ws, err)
		}
		if resp.Succeeded {
			return cl.claimed(ctx, ws, resp.Header.Revision, val)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // released meanwhile
		}
		var held Claim
		if err := json.Unmarshal(kvs[0].Value, &held); err != nil {
			return fmt.Errorf("claim %s: held claim: %w: %w", ws, ErrBadConfig, err)
		}
		if held.Node != cl.node {
			return &ClaimedError{Held: held}
		}
		cl.rmu.Lock()
		prev, had := cl.revs[ws]
		cl.rmu.Unlock()
		if had && kvs[0].ModRevision == prev && kvs[0].Lease == int64(s.Lease()) {
			return nil // this node's claim, as it put it: held all along
		}
		// This node's own: an earlier daemon's (one daemon serves a node)
		// or this one's. Take it over on this session's lease.
		resp, err = cl.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(s.Lease()))).Commit()
		if err != nil {
			return fmt.Errorf("claim %s: %w", ws, err)
		}
		if resp.Succeeded {
			return cl.claimed(ctx, ws, resp.Header.Revision, val)
		}
	}
	return fmt.Errorf("claim %s: the claim kept changing", ws)
}

// Release drops this node's claim on ws (none held: nothing to do).
func (cl *Claims) Release(ctx context.Context, ws string) error {
	cl.rmu.Lock()
	delete(cl.revs, ws)
	delete(cl.vals, ws)
	delete(cl.lostTo, ws)
	cl.rmu.Unlock()
	key := cl.root + ws
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	resp, err := get(ctx, cl.c, key)
	if err != nil {
		return fmt.Errorf("release claim on %s: %w", ws, noAnswer(ctx, err))
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	var held Claim
	if err := json.Unmarshal(resp.Kvs[0].Value, &held); err != nil || held.Node != cl.node {
		return nil // not ours to drop
	}
	if _, err := cl.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(key)).Commit(); err != nil {
		return fmt.Errorf("release claim on %s: %w", ws, err)
	}
	return nil
}

// Close ends the session: its lease is revoked, and every claim made on
// it goes.
func (cl *Claims) Close() error {
	cl.mu.Lock()
	cl.once.Do(func() { close(cl.closed) })
	s := cl.sess
	cl.sess = nil
	cl.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Close()
}

// Rev returns the revision of this node's put of ws's claim, 0 if it
// holds none: a mount record keeps it (workspace.MountRecord.ClaimRev),
// so that a recovery can look through the claim's history since
// (MovedSince).
func (cl *Claims) Rev(ws string) int64 {
	cl.rmu.Lock()
	defer cl.rmu.Unlock()
	return cl.revs[ws]
}

// HeadGuard is the node's store.Options.HeadGuard: called inside every
// transaction that moves ws's head, it reads ws's claim through the plane,
// so that the etcd Txn that appends compares the claim key's mod revision
// (etcdmeta's read set). The claim going between the read and the commit
// (its lease expired: etcd deleted it) fails the compare, and the rerun
// finds it gone.
//
// A workspace this node claims (its Claims put the claim) must still hold
// exactly that claim, else the append fails with store.ErrFenced; one it
// lost to another node (Claim answered ErrClaimed) fails the same way.
// Any other append (a land into a workspace this node does not mount,
// whether another node mounts it or nobody does) is not this guard's.
func (n *Node) HeadGuard(tx meta.Tx, ws string) error {
	cl := n.claims.Load()
	if cl == nil || ws == "" || len(ws) > meta.MaxPartSize {
		return nil
	}
	cl.rmu.Lock()
	want, mine := cl.vals[ws]
	other, lost := cl.lostTo[ws]
	cl.rmu.Unlock()
	if lost {
		return fmt.Errorf("workspace %s: node %s claimed it while this node's claim was gone: %w", ws, other.Node, store.ErrFenced)
	}
	if !mine {
		return nil
	}
	v, ok, err := tx.Get(ClaimSpace.Key([]byte(ws)))
	if err != nil {
		return fmt.Errorf("claim on %s: %w", ws, err)
	}
	if !ok {
		return fmt.Errorf("workspace %s: this node's claim is gone (its lease expired): %w", ws, store.ErrFenced)
	}
	if !bytes.Equal(v, want) {
		var held Claim
		_ = json.Unmarshal(v, &held)
		return fmt.Errorf("workspace %s: the claim is no longer this node's (now node %s's): %w", ws, held.Node, store.ErrFenced)
	}
	return nil
}

// MovedSince reports another node's claim of ws made after revision rev
// and before this node's current claim of it (released since or not), as
// the claim's history tells: a recovery's check that the workspace did
// not move on while this node was dead (rev from the dead daemon's mount
// record). History compacted away counts as such a claim. A rev of 0, or
// no claim of ws held here, reports none.
func (cl *Claims) MovedSince(ctx context.Context, ws string, rev int64) (Claim, bool, error) {
	upto := cl.Rev(ws)
	if rev <= 0 || upto <= rev+1 {
		return Claim{}, false, nil
	}
	return cl.claimedBetween(ctx, ws, rev, upto)
}
