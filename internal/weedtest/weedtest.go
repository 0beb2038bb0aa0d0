// Package weedtest starts a real S3 server for tests: SeaweedFS's `weed
// server -s3` on 127.0.0.1 ports reserved by internal/testport (outside
// the ephemeral range, locked across test processes), data in
// t.TempDir(), stopped (its whole process group) when the test ends. A
// start whose server cannot bind a port (one taken by a process outside
// testport's reservations) is retried on fresh ports, up to three times,
// and says so in the test log; a server that exits before it answers fails
// the test at once with its log.
//
// The binary is $ACYCLICFS_WEED, or the one scripts/build-weed.sh caches
// (/var/cache/acyclicfs/weed-VERSION/weed, or under
// $ACYCLICFS_WEED_CACHE). Without it Start skips the test, unless
// $ACYCLICFS_REQUIRE_WEED=1 (make test sets it): then it fails.
package weedtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/acyclicfs/acyclicfs/internal/testport"
)

// Version is the SeaweedFS module version scripts/build-weed.sh builds.
const Version = "v0.0.0-20261109003541-7506e5f91cd6"

// The credentials the server accepts (one admin identity).
const (
	AccessKey = "acyclicfs-test"
	SecretKey = "acyclicfs-test-secret"
)

// Binary returns the weed binary's path, or "" if there is none.
func Binary() string {
	if p := os.Getenv("ACYCLICFS_WEED"); p != "" {
		return p
	}
	cache := os.Getenv("ACYCLICFS_WEED_CACHE")
	if cache == "" {
		cache = "/var/cache/acyclicfs"
	}
	p := filepath.Join(cache, "weed-"+Version, "weed")
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p
	}
	return ""
}

// Server is a running weed server.
type Server struct {
	t     testing.TB
	bin   string
	dir   string
	ports [10]int
	used  []int // every port an attempt was given (their sockets are removed at the end)
	// Endpoint is the S3 API's HOST:PORT (plain http).
	Endpoint string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	werr   error         // cmd.Wait's result, set before exited closes
	log    *syncWriter
}

// Start runs a weed server with S3 for the rest of the test, and returns
// once S3 answers.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "no weed binary (run scripts/build-weed.sh, or set ACYCLICFS_WEED)"
		if os.Getenv("ACYCLICFS_REQUIRE_WEED") == "1" {
			t.Fatal(msg + "; ACYCLICFS_REQUIRE_WEED=1")
		}
		t.Skip(msg)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	cfg := filepath.Join(s.dir, "s3.json")
	ident := fmt.Sprintf(`{"identities":[{"name":"acyclicfs","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`, AccessKey, SecretKey)
	if err := os.WriteFile(cfg, []byte(ident), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		s.removeSockets()
	})
	const attempts = 3
	for i := 1; ; i++ {
		// Each attempt starts from empty directories: a master that
		// finds the state of one that ran on other ports freezes its
		// volume growth ("master state loss") and never takes a write.
		if err := s.freshDirs(); err != nil {
			t.Fatal(err)
		}
		s.takePorts()
		err := s.start()
		if err == nil {
			return s
		}
		if !errors.Is(err, errBind) || i == attempts {
			t.Fatalf("weed server (start %d of %d): %v", i, attempts, err)
		}
		t.Logf("weed server: start %d of %d could not bind its ports; retrying on fresh ports: %v", i, attempts, firstLine(err))
	}
}

// freshDirs makes the data and log directories empty.
func (s *Server) freshDirs() error {
	for _, d := range []string{"data", "log"} {
		p := filepath.Join(s.dir, d)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
	}
	return nil
}

func firstLine(err error) string {
	m := err.Error()
	if i := strings.IndexByte(m, '\n'); i >= 0 {
		return m[:i]
	}
	return m
}

// takeHook, when set (by this package's tests), hands out the ports.
var takeHook func(t testing.TB, n int) []int

// errBind is a start that failed because a port was taken.
var errBind = errors.New("a port was taken")

// takePorts reserves ten fresh ports (the last ones stay reserved until
// the test ends, harmlessly).
func (s *Server) takePorts() {
	take := testport.Take
	if takeHook != nil {
		take = takeHook
	}
	copy(s.ports[:], take(s.t, len(s.ports)))
	s.used = append(s.used, s.ports[:]...)
	s.Endpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports[6]))
}

// SetEnv sets the standard AWS credential variables to the server's for
// the rest of the test (what s3blobs.Open reads).
func (s *Server) SetEnv(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
}

func (s *Server) args() []string {
	p := func(i int) string { return strconv.Itoa(s.ports[i]) }
	// glog's files go to the test's directory, not $TMPDIR.
	return []string{"-logdir=" + filepath.Join(s.dir, "log"), "server",
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-dir=" + filepath.Join(s.dir, "data"),
		"-master.port=" + p(0), "-master.port.grpc=" + p(1),
		"-volume.port=" + p(2), "-volume.port.grpc=" + p(3),
		"-filer.port=" + p(4), "-filer.port.grpc=" + p(5),
		"-s3", "-s3.port=" + p(6), "-s3.port.grpc=" + p(7),
		"-s3.config=" + filepath.Join(s.dir, "s3.json"),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-master.volumeSizeLimitMB=64", "-volume.max=0",
		// A restarted master waits this long before it leads again.
		"-master.electionTimeout=1s",
	}
}

// start runs the server and waits until S3 answers. It fails with errBind
// when the server could not bind one of its ports, and at once with the
// server's log when the server exits before it answers.
func (s *Server) start() error {
	s.t.Helper()
	s.mu.Lock()
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	log := &syncWriter{w: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.cmd, s.log, s.exited = cmd, log, exited
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.werr = err
		s.mu.Unlock()
		close(exited)
	}()
	s.mu.Unlock()
	began := time.Now()
	if err := s.waitReady(3*time.Minute, exited, log); err != nil {
		s.Stop()
		err = fmt.Errorf("%w\n%s", err, tail(log.String(), 4000))
		if testport.BindFailed(log.String()) {
			err = fmt.Errorf("%w: %w", errBind, err)
		}
		return err
	}
	s.t.Logf("weed server -s3 on %s ready in %v", s.Endpoint, time.Since(began).Round(time.Millisecond))
	return nil
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Client is a minio client of the server with its credentials.
func (s *Server) Client() *minio.Client {
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(AccessKey, SecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// waitReady polls until S3 makes a bucket (or finds it made, after a
// restart): the gateway answers before its filer and volume are up, and
// there is no event to wait on. It gives up at once when the server exits
// or logs that it could not bind a port (weed's other services may live on
// without the one that failed).
func (s *Server) waitReady(limit time.Duration, exited <-chan struct{}, log *syncWriter) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c := s.Client()
	var last error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.MakeBucket(rctx, "weedtest-ready", minio.MakeBucketOptions{})
		if err != nil {
			if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
				err = nil
			}
		}
		if err == nil {
			// Writes need a volume: put one object.
			_, err = c.PutObject(rctx, "weedtest-ready", "probe", strings.NewReader("ok"), 2, minio.PutObjectOptions{})
		}
		rcancel()
		if err == nil {
			return nil
		}
		last = err
		if testport.BindFailed(log.String()) {
			return fmt.Errorf("S3 on %s: weed could not bind a port", s.Endpoint)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("S3 on %s not ready after %v: %w", s.Endpoint, limit, errors.Join(last, ctx.Err()))
		case <-exited:
			s.mu.Lock()
			werr := s.werr
			s.mu.Unlock()
			return fmt.Errorf("S3 on %s: weed exited before it answered (%v); last request: %w", s.Endpoint, werr, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop kills the server's process group and waits for it: an outage.
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	exited := s.exited
	s.cmd = nil
	s.mu.Unlock()
	// The waiter needs the lock to record the result.
	<-exited
	s.mu.Lock()
}

// Restart starts a stopped server again on the same ports and data, and
// returns once S3 answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	// The same ports: clients and stores know the endpoint. They stay
	// reserved by testport, so only a process outside it can have taken
	// one meanwhile.
	if err := s.start(); err != nil {
		s.t.Fatalf("weed server restart: %v", err)
	}
}

// Log is what the server printed so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// removeSockets removes the unix sockets weed makes in /tmp beside its
// gRPC ports.
func (s *Server) removeSockets() {
	for _, name := range []string{
		"seaweedfs-master-grpc-%d.sock", "seaweedfs-volume-grpc-%d.sock", "seaweedfs-filer-grpc-%d.sock",
		"seaweedfs-s3-grpc-%d.sock", "seaweedfs-filer-%d.sock", "seaweedfs-master-%d.sock",
		"seaweedfs-volume-%d.sock", "seaweedfs-s3-%d.sock",
	} {
		for _, p := range s.used {
			os.Remove(filepath.Join(os.TempDir(), fmt.Sprintf(name, p)))
		}
	}
}
