package s3blobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sync/errgroup"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// Options configure OpenSpec.
type Options struct {
	// TempDir is where puts larger than SpoolBytes are spooled (to learn
	// their ID before uploading); empty: os.TempDir().
	TempDir string
	// SpoolBytes is the most a put holds in memory; 0 means 8 MiB.
	SpoolBytes int64
	// CreateBucket makes the bucket if it does not exist (tests); without
	// it a missing bucket is an error.
	CreateBucket bool
	// Creds overrides the credentials (nil: the AWS environment
	// variables, credentials.NewEnvAWS).
	Creds *credentials.Credentials
	// MaxRetries bounds the client's retries of a failed request; 0
	// means 3.
	MaxRetries int
}

// Store is a blobs.Store on an S3 bucket: object id is the key
// PREFIX/objects/ab/cdef… (hex of the ID, fan-out as a store's objects/
// directory). All methods are safe for concurrent use.
type Store struct {
	c    *minio.Client
	spec Spec
	opt  Options
}

var (
	_ blobs.Store    = (*Store)(nil)
	_ blobs.Toucher  = (*Store)(nil)
	_ blobs.Uploader = (*Store)(nil)
)

// Open opens the store a spec names (ParseSpec), with credentials from
// the standard AWS environment variables (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN). The bucket must exist.
func Open(ctx context.Context, spec string) (*Store, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return OpenSpec(ctx, s, Options{})
}

// OpenSpec opens the store of a parsed spec. It checks that the bucket
// exists (or makes it with opt.CreateBucket): an unreachable server is
// an error wrapping blobs.ErrUnavailable.
func OpenSpec(ctx context.Context, spec Spec, opt Options) (*Store, error) {
	if opt.SpoolBytes <= 0 {
		opt.SpoolBytes = 8 << 20
	}
	if opt.TempDir == "" {
		opt.TempDir = os.TempDir()
	}
	if opt.MaxRetries <= 0 {
		opt.MaxRetries = 3
	}
	creds := opt.Creds
	if creds == nil {
		creds = credentials.NewEnvAWS()
	}
	tr, err := minio.DefaultTransport(!spec.Insecure)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", spec, err)
	}
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	tr.ResponseHeaderTimeout = time.Minute
	c, err := minio.New(spec.Endpoint, &minio.Options{
		Creds:        creds,
		Secure:       !spec.Insecure,
		Region:       spec.Region,
		Transport:    tr,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   opt.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", spec, err)
	}
	s := &Store{c: c, spec: spec, opt: opt}
	ok, err := c.BucketExists(ctx, spec.Bucket)
	if err != nil {
		return nil, s.fail("open bucket", spec.Bucket, err)
	}
	if !ok {
		if !opt.CreateBucket {
			return nil, fmt.Errorf("open %s: bucket %q does not exist: %w", spec, spec.Bucket, blobs.ErrNotFound)
		}
		if err := c.MakeBucket(ctx, spec.Bucket, minio.MakeBucketOptions{Region: spec.Region}); err != nil {
			return nil, s.fail("make bucket", spec.Bucket, err)
		}
	}
	return s, nil
}

// Spec is what the store was opened with.
func (s *Store) Spec() Spec { return s.spec }

// objectsPrefix is the key prefix of every object.
func (s *Store) objectsPrefix() string {
	if s.spec.Prefix == "" {
		return "objects/"
	}
	return s.spec.Prefix + "/objects/"
}

// Key is object id's key in the bucket.
func (s *Store) Key(id blobs.ID) string {
	h := id.String()
	return s.objectsPrefix() + h[:2] + "/" + h[2:]
}

// isNotFound reports an S3 "no such key" answer.
func isNotFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "NoSuchKey" || r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket"
}

// fail wraps a request's error: blobs.ErrUnavailable, and the cause.
func (s *Store) fail(op, key string, err error) error {
	return fmt.Errorf("s3 %s %s/%s at %s: %w: %w", op, s.spec.Bucket, key, s.spec.Endpoint, blobs.ErrUnavailable, err)
}

func missing(id blobs.ID) error {
	return fmt.Errorf("blob %s: %w", id.Short(), blobs.ErrNotFound)
}

// Stat returns object id's size and stored time (LastModified).
func (s *Store) Stat(id blobs.ID) (blobs.Info, error) {
	oi, err := s.c.StatObject(context.Background(), s.spec.Bucket, s.Key(id), minio.StatObjectOptions{})
	if err != nil {
		if isNotFound(err) {
			return blobs.Info{}, missing(id)
		}
		return blobs.Info{}, s.fail("stat", s.Key(id), err)
	}
	return blobs.Info{ID: id, Size: oi.Size, ModTime: oi.LastModified}, nil
}

// Open streams object id; the Read that reaches its end returns an error
// wrapping ErrCorrupt instead of io.EOF if the content does not hash to
// id (in either encoding).
func (s *Store) Open(id blobs.ID) (io.ReadCloser, error) {
	key := s.Key(id)
	obj, err := s.c.GetObject(context.Background(), s.spec.Bucket, key, minio.GetObjectOptions{})
	if err == nil {
		_, err = obj.Stat()
	}
	if err != nil {
		if obj != nil {
			obj.Close()
		}
		if isNotFound(err) {
			return nil, missing(id)
		}
		return nil, s.fail("get", key, err)
	}
	return &verifyingReader{s: s, obj: obj, key: key, v: blobs.NewVerifier(id)}, nil
}

type verifyingReader struct {
	s   *Store
	obj *minio.Object
	key string
	v   *blobs.Verifier
	err error
}

func (r *verifyingReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.obj.Read(p)
	r.v.Write(p[:n])
	switch {
	case err == io.EOF:
		if cerr := r.v.Check(); cerr != nil {
			r.err = cerr
		} else {
			r.err = io.EOF
		}
		return n, r.err
	case err != nil:
		r.err = r.s.fail("get", r.key, err)
		return n, r.err
	}
	return n, nil
}

func (r *verifyingReader) Close() error { return r.obj.Close() }

// Read returns object id's whole content, verified.
func (s *Store) Read(id blobs.ID) ([]byte, error) {
	rc, err := s.Open(id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// List calls fn for every object under the prefix (keys that are not an
// object's are skipped).
func (s *Store) List(fn func(blobs.Info) error) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pre := s.objectsPrefix()
	for oi := range s.c.ListObjects(ctx, s.spec.Bucket, minio.ListObjectsOptions{Prefix: pre, Recursive: true}) {
		if oi.Err != nil {
			return s.fail("list", pre, oi.Err)
		}
		id, ok := parseKey(strings.TrimPrefix(oi.Key, pre))
		if !ok {
			continue
		}
		if err := fn(blobs.Info{ID: id, Size: oi.Size, ModTime: oi.LastModified}); err != nil {
			return err
		}
	}
	return nil
}

// parseKey parses "ab/cdef…" (the key below objects/).
func parseKey(k string) (blobs.ID, bool) {
	var id blobs.ID
	if len(k) != 2*blobs.IDSize+1 || k[2] != '/' {
		return id, false
	}
	h := k[:2] + k[3:]
	for i := range blobs.IDSize {
		hi, ok1 := unhex(h[2*i])
		lo, ok2 := unhex(h[2*i+1])
		if !ok1 || !ok2 {
			return id, false
		}
		id[i] = hi<<4 | lo
	}
	return id, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Delete removes object id; an absent object is no error.
func (s *Store) Delete(id blobs.ID) error {
	key := s.Key(id)
	if err := s.c.RemoveObject(context.Background(), s.spec.Bucket, key, minio.RemoveObjectOptions{}); err != nil && !isNotFound(err) {
		return s.fail("delete", key, err)
	}
	return nil
}

// Touch sets object id's stored time (LastModified) to now: a copy of the
// object onto itself with its metadata replaced.
func (s *Store) Touch(id blobs.ID) error {
	key := s.Key(id)
	_, err := s.c.CopyObject(context.Background(),
		minio.CopyDestOptions{Bucket: s.spec.Bucket, Object: key, ReplaceMetadata: true,
			UserMetadata: map[string]string{"Acyclicfs-Touched": time.Now().UTC().Format(time.RFC3339)}},
		minio.CopySrcOptions{Bucket: s.spec.Bucket, Object: key})
	if err != nil {
		if isNotFound(err) {
			return missing(id)
		}
		return s.fail("touch", key, err)
	}
	return nil
}

// spool is content held to be uploaded once its ID is known: in memory,
// or in a temp file.
type spool struct {
	mem  []byte
	path string // temp file (removed by drop)
	file string // a caller's file (kept)
	size int64
}

func (sp *spool) reader() (io.ReadCloser, error) {
	switch {
	case sp.file != "":
		return os.Open(sp.file)
	case sp.path != "":
		return os.Open(sp.path)
	}
	return io.NopCloser(bytes.NewReader(sp.mem)), nil
}

func (sp *spool) drop() {
	if sp.path != "" {
		os.Remove(sp.path)
	}
}

// spoolReader reads r whole, hashing it (dense), into memory up to the
// bound and into a temp file past it.
func (s *Store) spoolReader(r io.Reader) (blobs.ID, *spool, error) {
	h := blobs.NewHasher()
	var buf bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(r, s.opt.SpoolBytes+1))
	if err != nil {
		return blobs.ID{}, nil, fmt.Errorf("s3 put: read: %w", err)
	}
	if n <= s.opt.SpoolBytes {
		return h.Sum(), &spool{mem: buf.Bytes(), size: n}, nil
	}
	f, err := os.CreateTemp(s.opt.TempDir, "acyclicfs-s3-spool-")
	if err != nil {
		return blobs.ID{}, nil, fmt.Errorf("s3 put: spool: %w", err)
	}
	sp := &spool{path: f.Name()}
	// What buf holds is hashed already.
	m, err := buf.WriteTo(f)
	if err == nil {
		var k int64
		k, err = io.Copy(io.MultiWriter(f, h), r)
		m += k
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		sp.drop()
		return blobs.ID{}, nil, fmt.Errorf("s3 put: spool: %w", err)
	}
	sp.size = m
	return h.Sum(), sp, nil
}

// spoolFile copies the file at path (keeping its holes) and returns the
// ID PutFile on a Dir would give it (sparse if it has many holes).
func (s *Store) spoolFile(path string) (blobs.ID, *spool, error) {
	src, err := os.Open(path)
	if err != nil {
		return blobs.ID{}, nil, fmt.Errorf("s3 put %s: %w", path, err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return blobs.ID{}, nil, fmt.Errorf("s3 put %s: %w", path, err)
	}
	if fi.Size() < 1<<20 {
		// Too small for 1 MiB of holes: a dense object.
		id, sp, err := s.spoolReader(src)
		if err != nil {
			return blobs.ID{}, nil, fmt.Errorf("s3 put %s: %w", path, err)
		}
		return id, sp, nil
	}
	f, err := os.CreateTemp(s.opt.TempDir, "acyclicfs-s3-spool-")
	if err != nil {
		return blobs.ID{}, nil, fmt.Errorf("s3 put %s: spool: %w", path, err)
	}
	sp := &spool{path: f.Name()}
	err = osfile.CopySparse(f, src, fi.Size())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var id blobs.ID
	if err == nil {
		id, sp.size, err = blobs.FileSum(sp.path)
	}
	if err != nil {
		sp.drop()
		return blobs.ID{}, nil, fmt.Errorf("s3 put %s: spool: %w", path, err)
	}
	return id, sp, nil
}

// send uploads a spool as object id unless the bucket has it.
func (s *Store) send(id blobs.ID, sp *spool) error {
	if _, err := s.Stat(id); err == nil {
		return nil
	} else if !errors.Is(err, blobs.ErrNotFound) {
		return err
	}
	return s.putObject(id, sp)
}

// putObject uploads a spool as object id.
func (s *Store) putObject(id blobs.ID, sp *spool) error {
	rc, err := sp.reader()
	if err != nil {
		return fmt.Errorf("s3 put blob %s: %w", id.Short(), err)
	}
	defer rc.Close()
	key := s.Key(id)
	_, err = s.c.PutObject(context.Background(), s.spec.Bucket, key, rc, sp.size,
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: sp.size <= 64<<20})
	if err != nil {
		return s.fail("put", key, err)
	}
	return nil
}

// Put stores what r yields. It is spooled first (to learn its ID): in
// memory up to Options.SpoolBytes, in a temp file past it; an object the
// bucket has is not sent again.
func (s *Store) Put(r io.Reader) (blobs.ID, int64, error) {
	id, sp, err := s.spoolReader(r)
	if err != nil {
		return blobs.ID{}, 0, err
	}
	defer sp.drop()
	return id, sp.size, s.send(id, sp)
}

// PutBytes stores p.
func (s *Store) PutBytes(p []byte) (blobs.ID, error) {
	id := blobs.Sum(p)
	return id, s.send(id, &spool{mem: p, size: int64(len(p))})
}

// PutFile stores the content of the file at path, under the ID a Dir
// gives it (sparse if it has at least 1 MiB of holes). The content is
// copied first, so the ID is that of what was stored even if the file
// changes meanwhile.
func (s *Store) PutFile(path string) (blobs.ID, int64, error) {
	id, sp, err := s.spoolFile(path)
	if err != nil {
		return blobs.ID{}, 0, err
	}
	defer sp.drop()
	return id, sp.size, s.send(id, sp)
}

// Upload stores the immutable file at path as object id without hashing
// it (blobs.Uploader): reads verify it. It does not ask whether the
// bucket has the object first (the tier just did).
func (s *Store) Upload(id blobs.ID, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("s3 upload blob %s: %w", id.Short(), err)
	}
	return s.putObject(id, &spool{file: path, size: fi.Size()})
}

// NewBatch starts a batch: objects are spooled at Put and uploaded
// together at Commit.
func (s *Store) NewBatch() blobs.Batch {
	return &batch{s: s, pending: map[blobs.ID]*spool{}}
}

type batch struct {
	s  *Store
	mu sync.Mutex
	// pending maps each object put since the last Commit to its spool.
	pending map[blobs.ID]*spool
}

func (b *batch) add(id blobs.ID, sp *spool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.pending[id]; dup {
		sp.drop()
		return
	}
	b.pending[id] = sp
}

func (b *batch) Put(r io.Reader) (blobs.ID, int64, error) {
	id, sp, err := b.s.spoolReader(r)
	if err != nil {
		return blobs.ID{}, 0, err
	}
	b.add(id, sp)
	return id, sp.size, nil
}

func (b *batch) PutBytes(p []byte) (blobs.ID, error) {
	id := blobs.Sum(p)
	b.add(id, &spool{mem: bytes.Clone(p), size: int64(len(p))})
	return id, nil
}

func (b *batch) PutFile(path string) (blobs.ID, int64, error) {
	id, sp, err := b.s.spoolFile(path)
	if err != nil {
		return blobs.ID{}, 0, err
	}
	b.add(id, sp)
	return id, sp.size, nil
}

// batchUploads bounds a Commit's uploads in flight.
const batchUploads = 8

// Commit uploads every pending object, a few at a time; those that fail
// stay pending.
func (b *batch) Commit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var (
		g  errgroup.Group
		mu sync.Mutex
	)
	g.SetLimit(batchUploads)
	type item struct {
		id blobs.ID
		sp *spool
	}
	todo := make([]item, 0, len(b.pending))
	for id, sp := range b.pending {
		todo = append(todo, item{id, sp})
	}
	for _, it := range todo {
		id, sp := it.id, it.sp
		g.Go(func() error {
			if err := b.s.send(id, sp); err != nil {
				return err
			}
			sp.drop()
			mu.Lock()
			delete(b.pending, id)
			mu.Unlock()
			return nil
		})
	}
	return g.Wait()
}

func (b *batch) Abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, sp := range b.pending {
		sp.drop()
		delete(b.pending, id)
	}
}
