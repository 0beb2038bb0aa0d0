package s3blobs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/blobs/s3blobs"
)

func TestParseSpec(t *testing.T) {
	good := []struct {
		in   string
		want s3blobs.Spec
	}{
		{"s3://bucket?endpoint=host:9000", s3blobs.Spec{Bucket: "bucket", Endpoint: "host:9000"}},
		{"s3://my.bucket-1/a/b/?endpoint=127.0.0.1:8333&insecure=1&region=eu-west-1",
			s3blobs.Spec{Bucket: "my.bucket-1", Prefix: "a/b", Endpoint: "127.0.0.1:8333", Insecure: true, Region: "eu-west-1"}},
		{"s3://bkt/p?endpoint=s3.example.com", s3blobs.Spec{Bucket: "bkt", Prefix: "p", Endpoint: "s3.example.com"}},
		{"s3://bkt/p?endpoint=[::1]:9000&insecure=false", s3blobs.Spec{Bucket: "bkt", Prefix: "p", Endpoint: "[::1]:9000"}},
	}
	for _, tc := range good {
		got, err := s3blobs.ParseSpec(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		again, err := s3blobs.ParseSpec(got.String())
		if err != nil || again != got {
			t.Errorf("round trip of %q via %q: %+v, %v", tc.in, got.String(), again, err)
		}
	}
	bad := map[string]string{
		"":                                     "scheme",
		"http://bucket?endpoint=h:1":           "scheme",
		"s3://bucket":                          "no endpoint",
		"s3://bucket?endpoint=":                "no endpoint",
		"s3://b?endpoint=h:1":                  "3 to 63",
		"s3://Bucket?endpoint=h:1":             "only a-z",
		"s3://-bucket?endpoint=h:1":            "only a-z",
		"s3://bucket/a//b?endpoint=h:1":        "empty",
		"s3://bucket/a/../b?endpoint=h:1":      "..",
		"s3://bucket?endpoint=h:99999":         "port",
		"s3://bucket?endpoint=h:1&endpoint=x":  "2 times",
		"s3://bucket?endpoint=h:1&insecure=ja": "boolean",
		"s3://bucket?endpoint=h:1&secret=x":    "unknown parameter",
		"s3://user@bucket?endpoint=h:1":        "form",
		"s3://bucket?endpoint=a/b:1":           "host",
	}
	for in, frag := range bad {
		_, err := s3blobs.ParseSpec(in)
		if !errors.Is(err, s3blobs.ErrBadSpec) || !strings.Contains(err.Error(), frag) {
			t.Errorf("ParseSpec(%q) = %v; want ErrBadSpec mentioning %q", in, err, frag)
		}
	}
}

// FuzzParseSpec: any input gives a spec or ErrBadSpec, never a panic,
// and an accepted spec formats to one that parses to the same.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"s3://bucket/prefix?endpoint=127.0.0.1:8333&insecure=1&region=us-east-1",
		"s3://bucket?endpoint=host", "s3://b/%2e%2e?endpoint=h:1", "s3://bucket/a b?endpoint=[::1]:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		sp, err := s3blobs.ParseSpec(in)
		if err != nil {
			if !errors.Is(err, s3blobs.ErrBadSpec) {
				t.Fatalf("ParseSpec(%q): %v is not ErrBadSpec", in, err)
			}
			return
		}
		again, err := s3blobs.ParseSpec(sp.String())
		if err != nil || again != sp {
			t.Fatalf("ParseSpec(%q) = %+v; its String %q parses to %+v, %v", in, sp, sp.String(), again, err)
		}
	})
}
