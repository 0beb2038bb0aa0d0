package sessions

import (
	"reflect"
	"testing"
)

// TestProcessesNamesAnOwnersMembers: Processes lists the live processes
// of one session with their command names, sorted by pid; foreign owners
// and owners of another key have none.
func TestProcessesNamesAnOwnersMembers(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(120, 120, 100)
	fp.add(100, 100, 100)
	fp.add(200, 200, 200)
	tr := newTestTracker(t, fp, newRecorder(), nil)

	got, err := tr.Processes(MakeOwner(BySID, 100))
	if err != nil {
		t.Fatal(err)
	}
	want := []Process{{100, "tool) (x y"}, {120, "tool) (x y"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Processes(sid:100) = %v, want %v", got, want)
	}
	fp.remove(120)
	if got, _ := tr.Processes(MakeOwner(BySID, 100)); len(got) != 1 || got[0].PID != 100 {
		t.Fatalf("after 120 exited: %v", got)
	}
	for _, o := range []Owner{"explicit:agent", MakeOwner(ByPGID, 100), MakeOwner(BySID, 300)} {
		if got, err := tr.Processes(o); err != nil || len(got) != 0 {
			t.Fatalf("Processes(%s) = %v, %v; want none", o, got, err)
		}
	}
}

func TestStatComm(t *testing.T) {
	for in, want := range map[string]string{
		"1 (sh) S 0":   "sh",
		"1 (a) b) S 0": "a) b",
		"1 sh S 0":     "?",
		"1 (" + string(make([]byte, 100)) + ") S": string(make([]byte, maxComm)),
	} {
		if got := statComm([]byte(in)); got != want {
			t.Errorf("statComm(%q) = %q, want %q", in, got, want)
		}
	}
}
