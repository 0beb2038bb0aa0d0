package gitmerge

import (
	"bytes"
	"sort"
	"strconv"
	"strings"

	"github.com/acyclicfs/acyclicfs/store"
)

// mergeHEAD merges HEAD as a value: kept where both agree, the side that
// changed it otherwise, ours where both changed it. A HEAD naming a branch
// the merge removed is reported.
func (j *job) mergeHEAD(res *refsResult) (*store.Entry, error) {
	b, o, t := res.b.head, res.o.head, res.t.head
	e, v := res.o.headE, o
	if b == o && o != t {
		e, v = res.t.headE, t
	}
	res.head = v
	if target, ok := strings.CutPrefix(v, "ref:"); ok {
		target = strings.TrimSpace(target)
		_, now := res.refs[target]
		_, wasO := res.o.refs[target]
		_, wasT := res.t.refs[target]
		if !now && (wasO || wasT) {
			j.conflict(ConflictHead, "HEAD", res.b.headE, res.o.headE, res.t.headE)
		}
	}
	return clone(e), nil
}

// mergeLogs merges logs/: each reflog both sides changed becomes the
// union of their lines in time order; then the merge's own reflog lines
// (merge commits) are added to the refs' and HEAD's logs where those
// exist.
func (j *job) mergeLogs(b, o, t *store.Entry) (*store.Entry, error) {
	e, err := j.merge3("logs", b, o, t, reflogPolicy)
	if err != nil || len(j.reflogAdd) == 0 || e == nil || e.Kind != store.KindDir {
		return e, err
	}
	d, err := j.openDir(e)
	if err != nil {
		return nil, err
	}
	add := map[string][]string{}
	for name, lines := range j.reflogAdd {
		add[name] = append(add[name], lines...)
		if head, ok := strings.CutPrefix(j.refs.head, "ref:"); ok && strings.TrimSpace(head) == name {
			add["HEAD"] = append(add["HEAD"], lines...)
		}
	}
	names := make([]string, 0, len(add))
	for n := range add {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cur, err := d.get(j, n)
		if err != nil {
			return nil, err
		}
		if cur == nil || !cur.Kind.IsRegular() {
			continue
		}
		data, err := j.readBlob(cur, "logs/"+n)
		if err != nil {
			return nil, err
		}
		merged := unionLines(data, []byte(strings.Join(add[n], "\n")+"\n"))
		ne, err := j.newBlobEntry(merged, cur, nil)
		if err != nil {
			return nil, err
		}
		if _, err := d.set(j, n, ne); err != nil {
			return nil, err
		}
	}
	out, err := j.writeDir(d, "logs")
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func reflogPolicy(j *job, rel string, _, o, t *store.Entry) (*store.Entry, error) {
	switch {
	case o == nil:
		return clone(t), nil // modified beats deleted
	case t == nil || !o.Kind.IsRegular() || !t.Kind.IsRegular():
		return clone(o), nil
	}
	ob, err := j.readBlob(o, rel)
	if err != nil {
		return nil, err
	}
	tb, err := j.readBlob(t, rel)
	if err != nil {
		return nil, err
	}
	return j.newBlobEntry(unionLines(ob, tb), o, t)
}

// unionLines merges two reflogs: every distinct line once, ordered by
// its timestamp (stable: ours' order, then theirs', among equal times).
// A line without a readable timestamp sorts with the line before it.
func unionLines(a, b []byte) []byte {
	type line struct {
		ts   int64
		text string
	}
	seen := map[string]bool{}
	var all []line
	for _, data := range [][]byte{a, b} {
		var prev int64
		for _, l := range strings.Split(string(data), "\n") {
			if l == "" || seen[l] {
				continue
			}
			seen[l] = true
			if ts, ok := reflogTime(l); ok {
				prev = ts
			}
			all = append(all, line{prev, l})
		}
	}
	sort.SliceStable(all, func(i, k int) bool { return all[i].ts < all[k].ts })
	var buf bytes.Buffer
	for _, l := range all {
		buf.WriteString(l.text)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// reflogTime reads the timestamp of a reflog line
// "<old> <new> <name> <<email>> <time> <tz>\t<message>".
func reflogTime(l string) (int64, bool) {
	head, _, _ := strings.Cut(l, "\t")
	i := strings.LastIndexByte(head, '>')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(head[i+1:])
	if len(f) < 1 {
		return 0, false
	}
	ts, err := strconv.ParseInt(f[0], 10, 64)
	return ts, err == nil
}

// shallowUnion is the union of both sides' shallow files (sorted), nil
// when neither has one.
func (j *job) shallowUnion() ([]byte, error) {
	set := map[string]bool{}
	found := false
	for _, t := range []*store.Tree{j.ot, j.tt} {
		e, ok := t.Lookup("shallow")
		if !ok || !e.Kind.IsRegular() {
			continue
		}
		found = true
		data, err := j.readBlob(&e, "shallow")
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Fields(string(data)) {
			set[l] = true
		}
	}
	if !found {
		return nil, nil
	}
	lines := make([]string, 0, len(set))
	for l := range set {
		lines = append(lines, l)
	}
	sort.Strings(lines)
	return []byte(strings.Join(lines, "\n") + "\n"), nil
}

// objectFormat reads extensions.objectformat from ours' config ("" for
// sha1).
func (j *job) objectFormat() (string, error) {
	e, ok := j.ot.Lookup("config")
	if !ok || !e.Kind.IsRegular() {
		return "", nil
	}
	data, err := j.readBlob(&e, "config")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "objectformat") {
			return strings.ToLower(strings.TrimSpace(v)), nil
		}
	}
	return "", nil
}
