package s3blobs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/blobs/blobtest"
	"github.com/acyclicfs/acyclicfs/blobs/s3blobs"
	"github.com/acyclicfs/acyclicfs/internal/weedtest"
)

// openB is open for a benchmark.
func openB(b *testing.B, srv *weedtest.Server, n *atomic.Int64) *s3blobs.Store {
	b.Helper()
	sp, err := s3blobs.ParseSpec(fmt.Sprintf("s3://acyclicfs/b%d?endpoint=%s&insecure=1", n.Add(1), srv.Endpoint))
	if err != nil {
		b.Fatal(err)
	}
	s, err := s3blobs.OpenSpec(context.Background(), sp, s3blobs.Options{CreateBucket: true, TempDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// open opens a store on srv's bucket "acyclicfs" under a fresh prefix,
// credentials from the AWS environment variables, as a user's would be.
func open(t *testing.T, srv *weedtest.Server, n *atomic.Int64, opt s3blobs.Options) *s3blobs.Store {
	t.Helper()
	spec := fmt.Sprintf("s3://acyclicfs/t%d/x?endpoint=%s&insecure=1", n.Add(1), srv.Endpoint)
	sp, err := s3blobs.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	opt.CreateBucket = true
	opt.TempDir = t.TempDir()
	s, err := s3blobs.OpenSpec(context.Background(), sp, opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The blob plane's conformance suite against a real S3 server, with
// small objects in memory and big ones spooled (a 1 KiB spool bound).
func TestConformance(t *testing.T) {
	srv := weedtest.Start(t)
	srv.SetEnv(t)
	var n atomic.Int64
	for _, spool := range []int64{0, 1 << 10} {
		t.Run(fmt.Sprintf("spool=%d", spool), func(t *testing.T) {
			blobtest.Run(t, blobtest.Harness{
				New: func(t *testing.T) blobs.Store { return open(t, srv, &n, s3blobs.Options{SpoolBytes: spool}) },
				Corrupt: func(t *testing.T, s blobs.Store, id blobs.ID, b []byte) {
					key := s.(*s3blobs.Store).Key(id)
					_, err := srv.Client().PutObject(context.Background(), "acyclicfs", key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{})
					if err != nil {
						t.Fatal(err)
					}
				},
			})
		})
	}
}

// Keys are PREFIX/objects/ab/cdef…; Touch moves LastModified forward;
// Open with a wrong bucket, or a stopped server, is a clear error.
func TestLayoutTouchAndErrors(t *testing.T) {
	srv := weedtest.Start(t)
	srv.SetEnv(t)
	var n atomic.Int64
	s := open(t, srv, &n, s3blobs.Options{})
	id, err := s.PutBytes([]byte("layout"))
	if err != nil {
		t.Fatal(err)
	}
	h := id.String()
	if want := "t1/x/objects/" + h[:2] + "/" + h[2:]; s.Key(id) != want {
		t.Fatalf("key %q, want %q", s.Key(id), want)
	}
	if _, err := srv.Client().StatObject(context.Background(), "acyclicfs", s.Key(id), minio.StatObjectOptions{}); err != nil {
		t.Fatalf("the object is not at its key: %v", err)
	}
	before, err := s.Stat(id)
	if err != nil {
		t.Fatal(err)
	}
	// LastModified has a resolution of a second.
	for {
		if err := s.Touch(id); err != nil {
			t.Fatal(err)
		}
		after, err := s.Stat(id)
		if err != nil {
			t.Fatal(err)
		}
		if after.ModTime.After(before.ModTime) {
			break
		}
		if after.ModTime.Before(before.ModTime) {
			t.Fatalf("touch moved LastModified back: %v → %v", before.ModTime, after.ModTime)
		}
	}
	if got, err := s.Read(id); err != nil || string(got) != "layout" {
		t.Fatalf("after touch: %q, %v", got, err)
	}
	if err := s.Touch(blobs.Sum([]byte("absent"))); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("touch of an absent object: %v", err)
	}

	if _, err := s3blobs.Open(context.Background(), "s3://no-such-bucket/p?insecure=1&endpoint="+srv.Endpoint); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("open of a missing bucket: %v", err)
	}
	srv.Stop()
	if _, err := s.Stat(id); !errors.Is(err, blobs.ErrUnavailable) {
		t.Fatalf("stat with the server stopped: %v", err)
	}
	if _, err := s.PutBytes([]byte("while down")); !errors.Is(err, blobs.ErrUnavailable) {
		t.Fatalf("put with the server stopped: %v", err)
	}
}
