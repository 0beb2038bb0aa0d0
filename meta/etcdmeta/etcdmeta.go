// Package etcdmeta serves the metadata plane (meta.Store) from etcd, so
// that many machines share one store's records (issue #28).
//
// An Update runs its closure optimistically, like etcd's concurrency.STM
// but with the ordered prefix scans meta.Tx needs: reads go to one
// snapshot revision (the first read's), the transaction records each key's
// mod revision (0 for a missing key) and each scanned namespace, and the
// writes are buffered (the closure reads its own writes). The commit is one
// etcd Txn: If every read key's mod revision is still the recorded one and
// no scanned namespace's guard key changed after the snapshot, Then the
// writes and a bump of the guard of every namespace written. A failed
// compare runs the closure again (bounded, with backoff and the context).
// A View reads at one revision and commits nothing.
//
// Keys sit under an escaped root (see key.go and docs/scale-out.md):
// "<prefix escaped> NUL d <meta.Key>" for records, "<prefix escaped> NUL g
// <namespace> NUL" for guards.
package etcdmeta

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acyclicfs/acyclicfs/meta"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

const (
	// MaxRequestBytes is the largest transaction sent to etcd: its
	// server's default request limit (--max-request-bytes, 1.5 MiB). A
	// bigger one fails with ErrTooLarge before anything is sent.
	MaxRequestBytes = 3 << 19
	// MaxTxnOps is the most operations one commit holds, on either side
	// (compares, writes): etcd's default --max-txn-ops.
	MaxTxnOps = 128
	// maxAttempts bounds the runs of one Update's closure.
	maxAttempts = 100
	// opOverhead is what a compare or an operation adds to a request
	// beyond its key and value bytes (protobuf framing and fields), with
	// room to spare.
	opOverhead = 32
)

var (
	// ErrConflict is returned when an Update's closure kept conflicting
	// with other writers for maxAttempts runs; nothing was written.
	ErrConflict = errors.New("etcd metadata transaction kept conflicting")
	// ErrTooLarge is returned when a transaction's writes exceed etcd's
	// request size or operation count; nothing was written.
	ErrTooLarge = errors.New("etcd metadata transaction too large")
	// ErrOutcomeUnknown is returned when the commit was sent but its
	// answer was lost (a member failed, the leader changed, the context
	// ended): the transaction was applied once or not at all, and a caller
	// that must know reads back what it wrote.
	ErrOutcomeUnknown = errors.New("etcd metadata commit outcome unknown")
)

// Store is a meta.Store in etcd under one prefix.
type Store struct {
	c    *clientv3.Client
	root string // encodeRoot(prefix)
	ttl  int64  // session lease TTL, seconds
	// timeout is Options.RequestTimeout; attempt Options.ReadAttempt.
	timeout time.Duration
	attempt time.Duration
	// keyCompared is Options.KeyCompared, each namespace as namespaceOf
	// spells it (ending in NUL).
	keyCompared map[string]bool

	mu     sync.Mutex       // protects lease and stopKA
	lease  clientv3.LeaseID // this process's session; 0: none yet or lost
	stopKA context.CancelFunc
}

// Options configure NewWithOptions.
type Options struct {
	// SessionTTL is the time to live of the etcd lease that records
	// written with PutSession (lease gates) are bound to: a process that
	// stops renewing it for this long loses them. Default
	// DefaultSessionTTL; etcd raises values under its minimum.
	SessionTTL time.Duration
	// RequestTimeout bounds each View and Update whose context has no
	// deadline (0: unbounded). Without it, a plane with no etcd member
	// reachable (no quorum) waits until the caller's context ends, and a
	// command given context.Background() waits for ever; with it, it
	// fails with ErrNoAnswer.
	RequestTimeout time.Duration
	// KeyCompared lists namespaces whose records are
	// written outside Update, straight to etcd (the cluster's claims,
	// bound to their own lease): their writes never bump the namespace's
	// guard, so a commit compares every read of them key by key, even
	// when the read set is too large and other reads are covered by their
	// guards.
	KeyCompared []meta.Space
	// ReadAttempt bounds each attempt of a read (and of the session
	// lease's grant), which is sent again when it times out while the
	// request's own deadline allows (0: one attempt). A member that hangs
	// (a stopped process keeps its connections open and answers nothing)
	// then costs a read this long, not the whole request: the client's
	// balancer sends the next attempt to another member. Commits are not
	// retried so: a commit sent to a member that hangs may still be
	// applied when it wakes (ErrOutcomeUnknown).
	ReadAttempt time.Duration
}

// ErrNoAnswer: etcd did not answer a View or Update within
// Options.RequestTimeout (no quorum, no member reachable). An Update that
// fails so may have been applied if its commit was sent (then the error
// is ErrOutcomeUnknown as well).
var ErrNoAnswer = errors.New("etcd did not answer")

// bound applies the request timeout to a context without a deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, has := ctx.Deadline(); has || s.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// noAnswer names etcd in an error from a context bound() made.
func (s *Store) noAnswer(outer, ctx context.Context, err error) error {
	if err != nil && outer.Err() == nil && ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w within %v: %w: %w", ErrNoAnswer, s.timeout, meta.ErrUnavailable, err)
	}
	return err
}

// DefaultSessionTTL is the session lease's TTL unless Options say.
const DefaultSessionTTL = 10 * time.Second

var (
	_ meta.Store     = (*Store)(nil)
	_ meta.Bounded   = (*Store)(nil)
	_ meta.SessionTx = (*tx)(nil)
)

// boundedSlack is what TxLimits keeps free of a Txn for the guards of
// the namespaces written and a handful of other reads (namespace names
// of up to 1 KiB).
const boundedSlack = 16

// TxLimits implements meta.Bounded: etcd's Txn limits, less room for the
// guard puts of up to boundedSlack namespaces. Each write costs its key
// under the root twice (the put and the compare of its read) and the
// framing of both.
func (s *Store) TxLimits() meta.TxLimits {
	perKey := len(s.root) + 1 + opOverhead
	return meta.TxLimits{
		MaxWrites: MaxTxnOps - boundedSlack,
		MaxBytes:  MaxRequestBytes - boundedSlack*(2*perKey+1024),
		PerWrite:  2 * perKey,
	}
}

// New returns the metadata plane kept in etcd under prefix (any bytes; two
// stores whose prefixes differ never see each other's keys). The client
// stays the caller's to close.
func New(client *clientv3.Client, prefix string) meta.Store {
	return NewWithOptions(client, prefix, Options{})
}

// NewWithOptions is New with options.
func NewWithOptions(client *clientv3.Client, prefix string, o Options) meta.Store {
	ttl := int64(o.SessionTTL / time.Second)
	if o.SessionTTL <= 0 {
		ttl = int64(DefaultSessionTTL / time.Second)
	}
	kc := map[string]bool{}
	for _, sp := range o.KeyCompared {
		kc[string(namespaceOf(sp.Prefix(nil)))] = true
	}
	return &Store{c: client, root: encodeRoot(prefix), ttl: max(ttl, 1), timeout: o.RequestTimeout, attempt: o.ReadAttempt, keyCompared: kc}
}

// retry runs op with a context bounded by Options.ReadAttempt, again
// while an attempt ran out of its own time and ctx goes on.
func retry[T any](s *Store, ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	if s.attempt <= 0 {
		return op(ctx)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, s.attempt)
		v, err := op(actx)
		expired := actx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil || !expired {
			return v, err
		}
	}
}

// get is a Get with retry.
func (s *Store) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return retry(s, ctx, func(ctx context.Context) (*clientv3.GetResponse, error) { return s.c.Get(ctx, key, opts...) })
}

func (s *Store) dataKey(k string) string  { return s.root + string(rune(tagData)) + k }
func (s *Store) guardKey(k string) string { return s.root + string(rune(tagGuard)) + k }

// View implements meta.Store.
func (s *Store) View(outer context.Context, fn func(meta.Tx) error) error {
	ctx, cancel := s.bound(outer)
	defer cancel()
	return s.noAnswer(outer, ctx, s.view(ctx, fn))
}

func (s *Store) view(ctx context.Context, fn func(meta.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		t := &tx{s: s, ctx: ctx}
		err := fn(t)
		if errors.Is(t.readErr, rpctypes.ErrCompacted) && attempt < maxAttempts {
			continue // the snapshot was compacted away: read a newer one
		}
		if err == nil {
			err = t.readErr
		}
		return err
	}
}

// Update implements meta.Store.
func (s *Store) Update(outer context.Context, fn func(meta.Tx) error) error {
	ctx, cancel := s.bound(outer)
	defer cancel()
	return s.noAnswer(outer, ctx, s.update(ctx, fn))
}

func (s *Store) update(ctx context.Context, fn func(meta.Tx) error) error {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t := &tx{s: s, ctx: ctx, writable: true}
		err := fn(t)
		switch {
		case errors.Is(t.readErr, rpctypes.ErrCompacted):
			// The snapshot was compacted away: a conflict like any other.
		case err != nil:
			return err
		case t.readErr != nil:
			return t.readErr // the closure dropped a failed read: commit nothing
		default:
			ok, err := t.commit()
			if err != nil || ok {
				return err
			}
		}
		if attempt >= maxAttempts {
			return fmt.Errorf("%w: %d runs", ErrConflict, attempt)
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

// backoff waits a random time under 2^attempt ms, at most 63 ms, so that
// writers that keep colliding spread out.
func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(rand.N(int64(1)<<min(attempt, 6))) * time.Millisecond
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// tx is one run of a closure. Maps are keyed by meta.Key as a string.
type tx struct {
	s        *Store
	ctx      context.Context
	writable bool
	readErr  error // the first failed read, so a closure cannot commit past it
	rev      int64 // snapshot revision; 0 before the first read

	reads   map[string]int64  // key -> mod revision at rev, 0 if absent
	scanned map[string]bool   // namespaces scanned (namespaceOf)
	pending map[string][]byte // key -> new value; nil for a deletion
	session map[string]bool   // pending puts bound to the session lease
	dels    []string          // DeletePrefix prefixes; none covers another
	touched map[string]bool   // namespaces written
}

// fetch reads from etcd at the snapshot, taking it on the first read.
func (t *tx) fetch(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if t.readErr != nil {
		return nil, t.readErr
	}
	var (
		resp *clientv3.GetResponse
		err  error
	)
	if t.rev == 0 {
		// The first read is linearizable: it sees every commit that
		// finished before it, and its revision becomes the snapshot.
		resp, err = t.s.get(t.ctx, key, opts...)
	} else {
		// Later reads name the snapshot's revision, whose contents are
		// the same on every member that applied it, so the member asked
		// answers from its own state without a round through the leader;
		// one that has not applied it yet says so, and the read goes the
		// linearizable way.
		opts = append(opts, clientv3.WithRev(t.rev))
		resp, err = t.s.get(t.ctx, key, append(opts, clientv3.WithSerializable())...)
		if errors.Is(err, rpctypes.ErrFutureRev) {
			resp, err = t.s.get(t.ctx, key, opts...)
		}
	}
	if err != nil {
		t.readErr = fmt.Errorf("etcdmeta: read %q at revision %d: %w", key, t.rev, err)
		return nil, t.readErr
	}
	if t.rev == 0 {
		t.rev = resp.Header.Revision
	}
	return resp, nil
}

func (t *tx) deletedByPrefix(k string) bool {
	for _, p := range t.dels {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func (t *tx) Get(k meta.Key) ([]byte, bool, error) {
	if _, _, err := meta.ParseKey(k); err != nil {
		return nil, false, err
	}
	ks := string(k)
	if v, ok := t.pending[ks]; ok {
		return v, v != nil, nil
	}
	if t.deletedByPrefix(ks) {
		return nil, false, nil
	}
	resp, err := t.fetch(t.s.dataKey(ks))
	if err != nil {
		return nil, false, err
	}
	var (
		v   []byte
		rev int64
	)
	if len(resp.Kvs) > 0 {
		v, rev = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
		if v == nil {
			v = []byte{}
		}
	}
	if t.writable {
		if t.reads == nil {
			t.reads = map[string]int64{}
		}
		t.reads[ks] = rev
	}
	return v, rev != 0, nil
}

// write checks a write and marks its namespace touched.
func (t *tx) write(k meta.Key, parse func([]byte) ([]string, []byte, error), what string) error {
	if _, _, err := parse(k); err != nil {
		return err
	}
	if !t.writable {
		return fmt.Errorf("%s %q: %w", what, k, meta.ErrReadOnly)
	}
	if t.touched == nil {
		t.touched = map[string]bool{}
		t.pending = map[string][]byte{}
	}
	t.touched[string(namespaceOf(k))] = true
	return nil
}

func (t *tx) Put(k meta.Key, v []byte) error {
	if err := t.write(k, meta.ParseKey, "put"); err != nil {
		return err
	}
	if n := len(t.s.dataKey(string(k))) + len(v) + opOverhead; n > MaxRequestBytes {
		return fmt.Errorf("%w: put %q: value of %d bytes (a transaction holds at most %d bytes)", ErrTooLarge, k, len(v), MaxRequestBytes)
	}
	t.pending[string(k)] = append(make([]byte, 0, len(v)), v...)
	delete(t.session, string(k))
	return nil
}

// PutSession implements meta.SessionTx: the put carries this process's
// session lease (granted at the commit if there is none), so etcd deletes
// the record when the lease expires or is revoked.
func (t *tx) PutSession(k meta.Key, v []byte) error {
	if err := t.Put(k, v); err != nil {
		return err
	}
	if t.session == nil {
		t.session = map[string]bool{}
	}
	t.session[string(k)] = true
	return nil
}

func (t *tx) Delete(k meta.Key) error {
	if err := t.write(k, meta.ParseKey, "delete"); err != nil {
		return err
	}
	delete(t.session, string(k))
	if t.deletedByPrefix(string(k)) {
		delete(t.pending, string(k)) // the range delete covers it
	} else {
		t.pending[string(k)] = nil
	}
	return nil
}

func (t *tx) DeletePrefix(prefix meta.Key) error {
	if err := t.write(prefix, meta.ParsePrefix, "delete prefix"); err != nil {
		return err
	}
	p := string(prefix)
	for k := range t.pending {
		if strings.HasPrefix(k, p) {
			delete(t.pending, k)
			delete(t.session, k)
		}
	}
	if t.deletedByPrefix(p) {
		return nil
	}
	t.dels = slices.DeleteFunc(t.dels, func(d string) bool { return strings.HasPrefix(d, p) })
	t.dels = append(t.dels, p)
	return nil
}

type entry struct {
	k string // meta.Key
	v []byte
}

func (t *tx) Scan(prefix meta.Key, o meta.ScanOptions, fn func(meta.Key, []byte) error) error {
	if _, _, err := meta.ParsePrefix(prefix); err != nil {
		return err
	}
	p := string(prefix)
	if t.writable {
		if t.scanned == nil {
			t.scanned = map[string]bool{}
		}
		t.scanned[string(namespaceOf(prefix))] = true
	}
	// Own writes under the prefix change what etcd returns, so a limit
	// can be left to etcd only when there are none.
	var own []entry
	affected := false
	for k, v := range t.pending {
		if strings.HasPrefix(k, p) {
			affected = true
			if v != nil {
				own = append(own, entry{k, v})
			}
		}
	}
	for _, d := range t.dels {
		if strings.HasPrefix(d, p) || strings.HasPrefix(p, d) {
			affected = true
		}
	}
	ep := t.s.dataKey(p)
	order := clientv3.SortAscend
	if o.Reverse {
		order = clientv3.SortDescend
	}
	opts := []clientv3.OpOption{clientv3.WithRange(prefixEnd(ep)), clientv3.WithSort(clientv3.SortByKey, order)}
	if !affected && o.Limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(o.Limit)))
	}
	resp, err := t.fetch(ep, opts...)
	if err != nil {
		return err
	}
	strip := len(t.s.dataKey(""))
	out := own
	for _, kv := range resp.Kvs {
		k := string(kv.Key[strip:])
		if _, mine := t.pending[k]; mine || t.deletedByPrefix(k) {
			continue
		}
		v := kv.Value
		if v == nil {
			v = []byte{}
		}
		out = append(out, entry{k, v})
	}
	if affected {
		slices.SortFunc(out, func(a, b entry) int {
			if o.Reverse {
				return strings.Compare(b.k, a.k)
			}
			return strings.Compare(a.k, b.k)
		})
	}
	if o.Limit > 0 && len(out) > o.Limit {
		out = out[:o.Limit]
	}
	for _, e := range out {
		if err := fn(meta.Key(e.k), e.v); err != nil {
			return err
		}
	}
	return nil
}

// commit sends the transaction as one etcd Txn. It reports false when a
// compare failed (the closure must run again).
func (t *tx) commit() (bool, error) {
	if len(t.touched) == 0 {
		return true, nil // read only: consistent at t.rev, nothing to send
	}
	var lease clientv3.LeaseID
	if len(t.session) > 0 {
		var err error
		if lease, err = t.s.session(t.ctx); err != nil {
			return false, fmt.Errorf("etcdmeta: session lease: %w", err)
		}
	}
	ops, size := t.ops(lease)
	cmps, cmpSize := t.compares()
	size += cmpSize
	if len(ops) > MaxTxnOps || len(cmps) > MaxTxnOps {
		return false, fmt.Errorf("%w: %d writes and %d compares (etcd allows %d of each)", ErrTooLarge, len(ops), len(cmps), MaxTxnOps)
	}
	if size > MaxRequestBytes {
		return false, fmt.Errorf("%w: about %d bytes (etcd accepts %d)", ErrTooLarge, size, MaxRequestBytes)
	}
	if err := t.ctx.Err(); err != nil {
		return false, err // not sent: certainly not applied
	}
	resp, err := t.s.c.Txn(t.ctx).If(cmps...).Then(ops...).Commit()
	if err != nil && lease != 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// The session ended (expired, revoked) before the commit, which
		// etcd refused whole: run again under a new session, where a
		// renewal of a gate the old session held finds it gone.
		t.s.sessionLost(lease)
		return false, nil
	}
	if err != nil {
		var ee rpctypes.EtcdError
		if errors.As(err, &ee) && ee.Code() == codes.InvalidArgument {
			// Checked before it was proposed: not applied.
			if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrTooManyOps) {
				return false, fmt.Errorf("%w: etcd refused the commit: %w", ErrTooLarge, err)
			}
			return false, fmt.Errorf("etcdmeta: etcd refused the commit: %w", err)
		}
		return false, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return resp.Succeeded, nil
}

// compares returns the If of the commit: every read key still at its
// recorded mod revision, every scanned namespace's guard not written after
// the snapshot. A guard is never deleted, so "mod revision <= snapshot"
// means no write in the namespace since. When the keys are too many for
// one Txn, each is replaced by its namespace's guard, which covers it.
func (t *tx) compares() ([]clientv3.Cmp, int) {
	guards := make(map[string]bool, len(t.scanned))
	for ns := range t.scanned {
		guards[ns] = true
	}
	keys := len(t.reads)+len(guards) <= MaxTxnOps
	if !keys {
		for k := range t.reads {
			if ns := string(namespaceOf([]byte(k))); !t.s.keyCompared[ns] {
				guards[ns] = true
			}
		}
	}
	var (
		cmps []clientv3.Cmp
		size int
	)
	for k, rev := range t.reads {
		if !keys && !t.s.keyCompared[string(namespaceOf([]byte(k)))] {
			continue
		}
		ek := t.s.dataKey(k)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ek), "=", rev))
		size += len(ek) + opOverhead
	}
	for ns := range guards {
		gk := t.s.guardKey(ns)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(gk), "<", t.rev+1))
		size += len(gk) + opOverhead
	}
	return cmps, size
}

// ops returns the Then of the commit and its size. etcd refuses a put
// inside a range deleted by the same Txn, so a prefix delete is split
// around the puts under it: [prefix, put1) [put1 NUL, put2) ... [putN NUL,
// prefix end).
func (t *tx) ops(lease clientv3.LeaseID) ([]clientv3.Op, int) {
	var (
		ops  []clientv3.Op
		size int
		puts []string
	)
	for k, v := range t.pending {
		ek := t.s.dataKey(k)
		if v == nil {
			ops = append(ops, clientv3.OpDelete(ek))
		} else {
			var opts []clientv3.OpOption
			if t.session[k] {
				opts = append(opts, clientv3.WithLease(lease))
			}
			ops = append(ops, clientv3.OpPut(ek, string(v), opts...))
			puts = append(puts, k)
		}
		size += len(ek) + len(v) + opOverhead
	}
	slices.Sort(puts)
	for _, p := range t.dels {
		start := t.s.dataKey(p)
		for _, k := range puts {
			if !strings.HasPrefix(k, p) {
				continue
			}
			if ek := t.s.dataKey(k); start < ek {
				ops = append(ops, clientv3.OpDelete(start, clientv3.WithRange(ek)))
				size += 2*len(ek) + opOverhead
			}
			start = t.s.dataKey(k) + "\x00"
		}
		end := prefixEnd(t.s.dataKey(p))
		ops = append(ops, clientv3.OpDelete(start, clientv3.WithRange(end)))
		size += len(start) + len(end) + opOverhead
	}
	for ns := range t.touched {
		gk := t.s.guardKey(ns)
		ops = append(ops, clientv3.OpPut(gk, ""))
		size += len(gk) + opOverhead
	}
	return ops, size
}

// session returns this process's session lease, granting it (and starting
// its keepalive) if there is none. The keepalive runs until the lease
// expires or is revoked, or the client closes; then the next session
// write grants a new lease, and whatever the old one held is gone.
func (s *Store) session(ctx context.Context) (clientv3.LeaseID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease != 0 {
		return s.lease, nil
	}
	g, err := retry(s, ctx, func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) { return s.c.Grant(ctx, s.ttl) })
	if err != nil {
		return 0, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	ch, err := s.c.KeepAlive(kctx, g.ID)
	if err != nil {
		cancel()
		return 0, err
	}
	s.lease, s.stopKA = g.ID, cancel
	go func() {
		for range ch {
			// Each answer is a renewal; the channel ends with the lease.
		}
		s.sessionLost(g.ID)
	}()
	return g.ID, nil
}

// sessionLost forgets lease (if it is still the session) and stops its
// keepalive.
func (s *Store) sessionLost(lease clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == lease {
		s.stopKA()
		s.lease, s.stopKA = 0, nil
	}
}

// SessionLease returns the etcd lease this process's session records are
// bound to (0 if none is held), for status and tests: revoking it fences
// every lease gate this Store wrote.
func (s *Store) SessionLease() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}
