package weedtest_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/acyclicfs/acyclicfs/internal/weedtest"
)

// The server serves S3, stops (requests fail) and comes back with its
// data.
func TestStartStopRestart(t *testing.T) {
	s := weedtest.Start(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.MakeBucket(ctx, "bucket1", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, "bucket1", "k", strings.NewReader("hello"), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := c.StatObject(ctx, "bucket1", "k", minio.StatObjectOptions{}); err == nil {
		t.Fatal("stat answered with the server stopped")
	}
	s.Restart()
	o, err := c.GetObject(ctx, "bucket1", "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil || string(b) != "hello" {
		t.Fatalf("after restart: %q, %v", b, err)
	}
}
