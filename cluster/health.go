package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A member that hangs (a stopped process, a machine gone silent) keeps
// its TCP connections open and answers nothing; the client's balancer
// would keep sending it a share of the requests, each waiting for its
// deadline. So every endpoint has a probe of its own (a serializable read
// on a client of that endpoint alone), and the node's client only has the
// endpoints whose probe answers:
//
//   - at Dial, the probes run at once; after the first answer the others
//     get dialGrace more, and the client starts with those that answered;
//   - then each endpoint is probed every probeEvery, each probe bounded by
//     probeTimeout: an endpoint that stops answering leaves the client's
//     set within probeEvery+probeTimeout (requests already sent to it
//     fail over as their own deadlines say), and one that answers again
//     comes back.
//
// gRPC keepalives (keepAliveTime, above etcd's default
// --grpc-keepalive-min-time of 5s) drop a dead connection the probes would
// not see, such as one a watch or a lease keep-alive holds.
const (
	probeTimeout  = time.Second
	probeEvery    = 500 * time.Millisecond
	dialGrace     = 300 * time.Millisecond
	keepAliveTime = 10 * time.Second
	keepAliveWait = 3 * time.Second
)

// ErrAuth: etcd refused the node's credentials (user, password or client
// certificate), or the members' certificate is not one the node trusts.
var ErrAuth = errors.New("etcd refused the credentials")

// Conn is an etcd client whose endpoints follow the members' health.
type Conn struct {
	*clientv3.Client
	all    []string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	healthy map[string]bool
	current []string
}

// Close stops the probes and closes the client.
func (c *Conn) Close() error {
	c.cancel()
	c.wg.Wait()
	return c.Client.Close()
}

// clientConfig is cfg's etcd client configuration for endpoints.
func clientConfig(cfg Config, endpoints []string, dialTimeout time.Duration) (clientv3.Config, error) {
	cc := clientv3.Config{Endpoints: endpoints, DialTimeout: dialTimeout, Logger: zap.NewNop(),
		DialKeepAliveTime: keepAliveTime, DialKeepAliveTimeout: keepAliveWait}
	if len(cfg.Endpoints) > 0 && strings.HasPrefix(cfg.Endpoints[0], "https://") {
		info := transport.TLSInfo{TrustedCAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile}
		var tc *tls.Config
		var err error
		if cfg.CertFile == "" && cfg.CAFile == "" {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		} else if tc, err = info.ClientConfig(); err != nil {
			return cc, fmt.Errorf("%w: etcd TLS files (ca %q, cert %q, key %q): %w", ErrBadConfig, cfg.CAFile, cfg.CertFile, cfg.KeyFile, err)
		}
		cc.TLS = tc
	}
	if cfg.User != "" {
		pw, err := password(cfg)
		if err != nil {
			return cc, err
		}
		cc.Username, cc.Password = cfg.User, pw
	}
	return cc, nil
}

// password reads the etcd user's password: from cfg.PasswordFile (a file
// no one but its owner may read or write; its trailing newline dropped),
// else from $ACYCLICFS_ETCD_PASSWORD.
func password(cfg Config) (string, error) {
	if cfg.PasswordFile == "" {
		pw := os.Getenv(PasswordEnv)
		if pw == "" {
			return "", fmt.Errorf("%w: etcd user %q needs a password: set $%s or give ?password-file=FILE", ErrBadConfig, cfg.User, PasswordEnv)
		}
		return pw, nil
	}
	f, err := os.Open(cfg.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("%w: etcd password file: %w", ErrBadConfig, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: etcd password file: %w", ErrBadConfig, err)
	}
	if fi.Mode().Perm()&0o077 != 0 || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: etcd password file %s has mode %v: only its owner may read it (chmod 600)", ErrBadConfig, cfg.PasswordFile, fi.Mode())
	}
	b := make([]byte, 4097)
	n, _ := f.Read(b)
	if n > 4096 {
		return "", fmt.Errorf("%w: etcd password file %s is over 4096 bytes", ErrBadConfig, cfg.PasswordFile)
	}
	pw := strings.TrimRight(string(b[:n]), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("%w: etcd password file %s is empty", ErrBadConfig, cfg.PasswordFile)
	}
	return pw, nil
}

// probe is one endpoint's own client.
type probe struct {
	ep  string
	cfg clientv3.Config
	key string
	c   *clientv3.Client
}

// check probes once within timeout: a client of the endpoint alone
// (made on the first call, or again after it could not be; it lives
// until life ends), then a serializable read of key.
func (p *probe) check(life context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(life, timeout)
	defer cancel()
	if p.c == nil {
		cfg := p.cfg
		cfg.Context = life
		cfg.DialTimeout = timeout
		c, err := clientv3.New(cfg)
		if err != nil {
			return err
		}
		p.c = c
	}
	_, err := p.c.Get(ctx, p.key, clientv3.WithSerializable(), clientv3.WithCountOnly())
	return err
}

func (p *probe) close() {
	if p.c != nil {
		p.c.Close()
		p.c = nil
	}
}

// alive reports whether a probe's outcome is an answer of the member:
// none but a deadline, a closed or failed connection (a refusal of the
// anonymous probe, "user name is empty" or "permission denied", is an
// answer).
func alive(err error) bool {
	if err == nil || refused(err) {
		return true
	}
	// Any other error etcd itself sent is an answer too.
	var ee rpctypes.EtcdError
	return errors.As(err, &ee)
}

// refused reports whether err says the credentials were refused (not
// that the member did not answer).
func refused(err error) bool {
	if errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrPermissionDenied) ||
		errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrUserNotFound) || errors.Is(err, rpctypes.ErrAuthNotEnabled) {
		return true
	}
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return true
	case codes.InvalidArgument, codes.FailedPrecondition:
		m := err.Error()
		return strings.Contains(m, "auth") || strings.Contains(m, "user") || strings.Contains(m, "permission")
	}
	return false
}

type verdict struct {
	ep  string
	err error
}

func dial(ctx context.Context, cfg Config) (*Conn, error) {
	eps := strings.Join(cfg.Endpoints, ",")
	base, err := clientConfig(cfg, cfg.Endpoints, DialTimeout)
	if err != nil {
		return nil, err
	}
	key := cfg.Prefix + "\x00"
	mctx, mcancel := context.WithCancel(context.Background())
	conn := &Conn{all: cfg.Endpoints, cancel: mcancel, healthy: map[string]bool{}}
	// Every probe at once (each endpoint's monitor starts with one);
	// after the first answer, dialGrace for the rest.
	first := make(chan verdict, len(cfg.Endpoints))
	for _, ep := range cfg.Endpoints {
		// A probe asks whether the member answers, not whether it takes
		// the credentials (the client's open checks those): it goes
		// without the user, so a probe costs the member no password hash.
		pc := base
		pc.Endpoints, pc.Username, pc.Password = []string{ep}, "", ""
		conn.wg.Add(1)
		go conn.monitor(mctx, &probe{ep: ep, cfg: pc, key: key}, first)
	}
	fail := func(err error) (*Conn, error) {
		// The probes end with mctx; one still dialing ends within
		// DialTimeout, on its own.
		mcancel()
		return nil, err
	}
	timeout := time.NewTimer(DialTimeout)
	defer timeout.Stop()
	// No answer within probeTimeout: a TLS handshake of our own may say
	// why (gRPC only reports the deadline).
	diagnose := time.After(probeTimeout)
	var grace <-chan time.Time
	var firstErr error
	answered := 0
collect:
	for n := 0; n < len(cfg.Endpoints); n++ {
		select {
		case v := <-first:
			if alive(v.err) {
				answered++
				if grace == nil {
					grace = time.After(dialGrace)
				}
			} else if firstErr == nil || refused(v.err) {
				firstErr = v.err
			}
		case <-grace:
			break collect // the rest are slow: their monitors add them when they answer
		case <-diagnose:
			n--
			if answered > 0 {
				continue
			}
			if d := diagnoseTLS(base, cfg.Endpoints); d != nil {
				return fail(fmt.Errorf("%w: etcd %s: %w", ErrAuth, eps, d))
			}
		case <-timeout.C:
			break collect
		case <-ctx.Done():
			return fail(fmt.Errorf("etcd %s: %w", eps, ctx.Err()))
		}
	}
	if answered == 0 {
		if refused(firstErr) {
			return fail(fmt.Errorf("%w: etcd %s: %w", ErrAuth, eps, firstErr))
		}
		if firstErr == nil {
			firstErr = context.DeadlineExceeded
		}
		return fail(fmt.Errorf("%w: no answer from %s within %v: %w", ErrUnreachable, eps, DialTimeout, firstErr))
	}
	conn.mu.Lock()
	live := slices.DeleteFunc(slices.Clone(cfg.Endpoints), func(ep string) bool { return !conn.healthy[ep] })
	cc := base
	cc.Endpoints = live
	c, err := clientv3.New(cc)
	if err == nil {
		conn.Client, conn.current = c, live
	}
	conn.mu.Unlock()
	if err != nil {
		if refused(err) {
			return fail(fmt.Errorf("%w: etcd %s: %w", ErrAuth, eps, err))
		}
		return fail(fmt.Errorf("%w: %s: %w", ErrUnreachable, eps, err))
	}
	// The probes answered alone; one linearizable read says that a quorum
	// answers.
	rctx, rcancel := context.WithTimeout(ctx, DialTimeout)
	defer rcancel()
	if _, err := c.Get(rctx, key, clientv3.WithCountOnly()); err != nil {
		c.Close()
		if refused(err) {
			return fail(fmt.Errorf("%w: etcd %s: %w", ErrAuth, eps, err))
		}
		return fail(fmt.Errorf("%w: no quorum answered from %s within %v: %w", ErrUnreachable, eps, DialTimeout, err))
	}
	return conn, nil
}

// monitor probes p's endpoint, first within DialTimeout (its verdict
// sent on first), then every probeEvery within probeTimeout until ctx
// ends, and updates the client's endpoints when its verdict changes.
func (c *Conn) monitor(ctx context.Context, p *probe, first chan<- verdict) {
	defer c.wg.Done()
	defer p.close()
	err := p.check(ctx, DialTimeout)
	c.set(p.ep, alive(err))
	first <- verdict{p.ep, err}
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := p.check(ctx, probeTimeout)
		if ctx.Err() != nil {
			return
		}
		if err != nil && p.c != nil && status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
			// A client that failed otherwise (its token refused, say) is
			// made again on the next probe.
			p.close()
		}
		c.set(p.ep, alive(err))
	}
}

// set records an endpoint's health and gives the client the endpoints
// that answer (all of them when none does: then the requests' own
// deadlines tell).
func (c *Conn) set(ep string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.healthy[ep] == ok {
		return
	}
	c.healthy[ep] = ok
	if c.Client == nil {
		return // Dial has not made it yet
	}
	live := slices.DeleteFunc(slices.Clone(c.all), func(e string) bool { return !c.healthy[e] })
	if len(live) == 0 {
		live = c.all
	}
	if !slices.Equal(live, c.current) {
		c.current = live
		c.Client.SetEndpoints(live...)
	}
}

// Slow returns the endpoints whose latest probe did not answer.
func (c *Conn) Slow() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(c.all), func(e string) bool { return c.healthy[e] })
}

// Endpoints returns the endpoints the client sends requests to now.
func (c *Conn) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.current)
}

// diagnoseTLS says why a TLS handshake with the first endpoint that
// answers TCP fails (the members' certificate not trusted, the client's
// refused), or nil: gRPC only reports a deadline.
func diagnoseTLS(cc clientv3.Config, endpoints []string) error {
	if cc.TLS == nil {
		return nil
	}
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil {
			continue
		}
		d := &net.Dialer{Timeout: probeTimeout}
		tc := cc.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName = u.Hostname()
		}
		tc.NextProtos = []string{"h2"}
		conn, err := tls.DialWithDialer(d, "tcp", u.Host, tc)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			var oe *net.OpError
			if errors.As(err, &oe) && oe.Op == "dial" {
				continue // nothing listens: not a TLS matter
			}
			return fmt.Errorf("TLS with %s: %w", u.Host, err)
		}
		// TLS 1.3: the server judges the client's certificate after the
		// client's side of the handshake; its refusal comes as an alert
		// on the first read.
		_ = conn.SetDeadline(time.Now().Add(probeTimeout))
		_, err = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		if err == nil {
			_, err = conn.Read(make([]byte, 1))
		}
		conn.Close()
		if err != nil && strings.Contains(err.Error(), "tls:") {
			return fmt.Errorf("TLS with %s: %w", u.Host, err)
		}
	}
	return nil
}

// attempt runs a read op (or a lease grant) with each try bounded by
// ReadAttempt, again while a try ran out of its time and ctx goes on: a
// member that hangs holds one try, and the balancer sends the next to
// another member (see etcdmeta.Options.ReadAttempt).
func attempt[T any](ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, ReadAttempt)
		v, err := op(actx)
		expired := actx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil || !expired {
			return v, err
		}
	}
}

// get is c.Get through attempt.
func get(ctx context.Context, c *clientv3.Client, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return attempt(ctx, func(ctx context.Context) (*clientv3.GetResponse, error) { return c.Get(ctx, key, opts...) })
}

// noAnswer names etcd in an error of a request whose context (bounded by
// DialTimeout) ran out: ErrUnreachable.
func noAnswer(ctx context.Context, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded) {
		return fmt.Errorf("%w: no answer within %v: %w", ErrUnreachable, DialTimeout, err)
	}
	return err
}
