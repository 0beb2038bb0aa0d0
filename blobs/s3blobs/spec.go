package s3blobs

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ErrBadSpec is returned for a blob store spec that is not
// s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&insecure=1][&region=R].
var ErrBadSpec = errors.New("bad s3 blob store spec")

// Spec is a parsed s3://BUCKET/PREFIX?endpoint=HOST:PORT spec.
type Spec struct {
	Bucket string
	// Prefix is the key prefix objects are kept under, without leading
	// or trailing slashes; empty: the bucket's root.
	Prefix string
	// Endpoint is HOST:PORT (or HOST) of the S3 API.
	Endpoint string
	// Insecure speaks plain http instead of https.
	Insecure bool
	// Region is the bucket's region; empty: the client asks.
	Region string
}

// String formats the spec back (a round trip of ParseSpec).
func (s Spec) String() string {
	u := url.URL{Scheme: "s3", Host: s.Bucket, Path: "/" + s.Prefix}
	if s.Prefix == "" {
		u.Path = ""
	}
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	if s.Insecure {
		q.Set("insecure", "1")
	}
	if s.Region != "" {
		q.Set("region", s.Region)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func bad(spec, format string, args ...any) error {
	return fmt.Errorf("%w %q: %s (want s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&insecure=1][&region=REGION])",
		ErrBadSpec, spec, fmt.Sprintf(format, args...))
}

// ParseSpec parses s3://BUCKET[/PREFIX]?endpoint=HOST:PORT with the
// optional parameters insecure=1 (http) and region=REGION. Bucket names
// follow S3's rules (3-63 of a-z, 0-9, '.', '-', starting and ending
// with a letter or digit); the prefix is a relative path without empty,
// "." or ".." segments.
func ParseSpec(spec string) (Spec, error) {
	var s Spec
	u, err := url.Parse(spec)
	if err != nil {
		return s, bad(spec, "%v", err)
	}
	if u.Scheme != "s3" {
		return s, bad(spec, "scheme %q is not s3", u.Scheme)
	}
	if u.Opaque != "" || u.User != nil || u.Fragment != "" {
		return s, bad(spec, "not of the form s3://BUCKET/PREFIX")
	}
	s.Bucket = u.Host
	if err := checkBucket(s.Bucket); err != nil {
		return s, bad(spec, "%v", err)
	}
	p := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if p != "" {
		for seg := range strings.SplitSeq(p, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return s, bad(spec, "prefix %q has an empty, . or .. segment", p)
			}
			for _, r := range seg {
				if r < 0x20 || r == 0x7f {
					return s, bad(spec, "prefix %q has a control character", p)
				}
			}
		}
	}
	s.Prefix = p
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return s, bad(spec, "query: %v", err)
	}
	for k, v := range q {
		if len(v) != 1 {
			return s, bad(spec, "parameter %q given %d times", k, len(v))
		}
		switch k {
		case "endpoint":
			s.Endpoint = v[0]
		case "insecure":
			b, err := strconv.ParseBool(v[0])
			if err != nil {
				return s, bad(spec, "insecure=%q is not a boolean", v[0])
			}
			s.Insecure = b
		case "region":
			if v[0] == "" || strings.ContainsAny(v[0], "/ \t\n") {
				return s, bad(spec, "region %q", v[0])
			}
			s.Region = v[0]
		default:
			return s, bad(spec, "unknown parameter %q", k)
		}
	}
	if s.Endpoint == "" {
		return s, bad(spec, "no endpoint=HOST:PORT")
	}
	if err := checkEndpoint(s.Endpoint); err != nil {
		return s, bad(spec, "endpoint %q: %v", s.Endpoint, err)
	}
	return s, nil
}

func checkBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q is not 3 to 63 characters", b)
	}
	for i, r := range b {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (r == '.' || r == '-') && i > 0 && i < len(b)-1
		if !ok {
			return fmt.Errorf("bucket %q: only a-z, 0-9, '.' and '-' (not first or last)", b)
		}
	}
	return nil
}

func checkEndpoint(e string) error {
	host, port := e, ""
	if h, p, err := net.SplitHostPort(e); err == nil {
		host, port = h, p
	} else if strings.Contains(e, ":") && !strings.HasPrefix(e, "[") {
		return fmt.Errorf("not HOST:PORT")
	}
	if host == "" {
		return fmt.Errorf("no host")
	}
	if strings.ContainsAny(host, "/?#@ \t\n") {
		return fmt.Errorf("host %q", host)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q", port)
		}
	}
	return nil
}
