// Package fsmhook is git's fsmonitor hook (protocol version 2) for a work
// tree inside an acyclicfs mount: it finds the mount in mountinfo, asks
// the store's daemon over its socket which paths changed since a token,
// and prints git's answer. It imports only the standard library and
// internal/fsmtoken, so that the small hook binary (cmd/acyclicfs-fsmonitor)
// that git starts for every status starts fast; `acyclicfs fsmonitor` runs
// the same code. docs/git.md "fsmonitor".
package fsmhook

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/fsmtoken"
)

// Request asks the daemon about the mount at Mountpoint (POST /fsmonitor).
type Request struct {
	Mountpoint string `json:"mountpoint"`
	Dev        string `json:"dev"`    // the mount's device, "major:minor"
	Prefix     string `json:"prefix"` // the worktree, relative to the mount root
	Token      string `json:"token"`
}

// Answer is the daemon's answer: the token to hand back next time, and
// either All (everything may have changed) or the changed Paths.
type Answer struct {
	Token string
	All   bool
	Paths []string
}

// Timeout bounds the daemon's answer: git waits for the hook.
const Timeout = 10 * time.Second

// Unknown is the answer when nothing better is known: a token no mount
// accepts as a base, and everything.
func Unknown() Answer { return Answer{Token: fsmtoken.Token{}.String(), All: true} }

// Query asks the daemon listening on socket about the mount holding cwd;
// whatever it cannot answer exactly is Unknown.
func Query(socket, cwd, token string) Answer {
	cwd, err := filepath.Abs(cwd)
	if err != nil {
		return Unknown()
	}
	mp, dev, ok := MountOf(cwd)
	if !ok {
		return Unknown()
	}
	prefix, err := filepath.Rel(mp, cwd)
	if err != nil || prefix == ".." || strings.HasPrefix(prefix, "../") {
		return Unknown()
	}
	if prefix == "." {
		prefix = ""
	}
	body, err := json.Marshal(Request{Mountpoint: mp, Dev: dev, Prefix: filepath.ToSlash(prefix), Token: token})
	if err != nil {
		return Unknown()
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://acyclicfs/fsmonitor", bytes.NewReader(body))
	if err != nil {
		return Unknown()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return Unknown()
	}
	defer resp.Body.Close()
	var ans Answer
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<30)).Decode(&ans) != nil || ans.Token == "" {
		return Unknown()
	}
	return ans
}

// Print writes ans as git reads it: "<token>\0<path>\0…", "/" for all.
func Print(w io.Writer, ans Answer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(ans.Token)
	bw.WriteByte(0)
	if ans.All {
		bw.WriteString("/")
		bw.WriteByte(0)
	} else {
		for _, p := range ans.Paths {
			bw.WriteString(p)
			bw.WriteByte(0)
		}
	}
	return bw.Flush()
}

// MountOf finds, in mountinfo, the innermost mount holding path and
// reports its mountpoint and device if it is an acyclicfs mount. It asks
// nothing of the mount itself.
func MountOf(path string) (mp, dev string, ours bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	best, bestDev, bestOurs := "", "", false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp != "/" && path != mp && !strings.HasPrefix(path, mp+"/") {
			continue
		}
		if len(mp) < len(best) {
			continue
		}
		_, post, _ := strings.Cut(line, " - ")
		pf := strings.Fields(post)
		// Later lines mount over earlier ones at the same place.
		best, bestDev = mp, fields[2]
		bestOurs = len(pf) >= 2 && pf[0] == "fuse.acyclicfs" && strings.HasPrefix(pf[1], "acyclicfs")
	}
	return best, bestDev, bestOurs && best != ""
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			okOct := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					okOct = false
					break
				}
				v = v*8 + (c - '0')
			}
			if okOct {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
