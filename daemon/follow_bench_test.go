package daemon

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// BenchmarkFollowParent measures how long a commit into p on node A takes
// to reach node B's idle mounted child c as a view switch request (the
// watch, B's re-read, the window's claim, the rebase and its
// publication): the metric commit-to-switch-ms, per commit. ns/op also
// counts A's commit itself.
func BenchmarkFollowParent(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchFollowParent(b, meta.NewMemory()) })
	b.Run("etcd", func(b *testing.B) {
		cl := etcdtest.Start(b).Client()
		benchFollowParent(b, etcdmeta.New(cl, "follow-bench"))
	})
}

func benchFollowParent(b *testing.B, plane meta.Store) {
	dir := b.TempDir()
	f := newFixtureOn(b, dir, workspace.Options{NoSync: true, Meta: plane})
	b.Cleanup(f.close)
	switched := make(chan time.Time, 1)
	f.v.onSwitch = func(store.ID) { switched <- time.Now() }
	f.s.followParent()
	timer := &headTimer{Store: plane, prefix: meta.NewSpace("heads", "p").Prefix(nil)}
	mA, err := workspace.Open(filepath.Join(b.TempDir(), "store"), workspace.Options{NoSync: true, Meta: timer})
	if err != nil {
		b.Fatal(err)
	}
	defer mA.Close()
	src := filepath.Join(b.TempDir(), "src")
	write(b, src, "a.txt", "a\n")
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		write(b, src, "n.txt", string(rune('a'+i%26))+time.Now().String())
		if _, _, err := mA.Commit(context.Background(), "p", src); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-switched:
			total += at.Sub(timer.committed())
		case <-time.After(30 * time.Second):
			b.Fatal("B's mount did not follow")
		}
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "commit-to-switch-ms")
}
