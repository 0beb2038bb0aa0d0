package corestate

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"testing"
)

func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte(`{"revision":1,"value":{"workspace":"w"}}`))
	f.Add([]byte(`{"revision":18446744073709551615,"value":null}`))
	f.Add([]byte(`{"revision":0,"value":1}`))
	f.Add([]byte(`{"revision":1,"value":1}{"revision":2,"value":2}`))
	f.Add([]byte(`{"revision":1,"val`))
	f.Add([]byte("torn"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEnvelope(b)
		if err != nil {
			return
		}
		if e.Revision == 0 || len(e.Value) == 0 {
			t.Fatalf("accepted envelope without revision or value: %q", b)
		}
		again, err := encodeEnvelope(e)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		e2, err := decodeEnvelope(again)
		if err != nil || e2.Revision != e.Revision || !bytes.Equal(e2.Value, e.Value) {
			t.Fatalf("round trip %q -> %q: %+v %v", b, again, e2, err)
		}
	})
}

func FuzzDecodeJournal(f *testing.F) {
	good, _ := encodeJournal(journal{Version: journalVersion, ID: hexKey("tx"), Phase: phasePrepared, Writes: []journalWrite{
		{Family: "a", Key: hexKey("k"), Before: env(1, "1"), After: env(2, `{"x":[1,2]}`)},
		{Family: "b", Key: hexKey("\x00"), Before: env(4, "true")},
		{Family: "c", Key: hexKey("new"), After: env(1, `"v"`)},
	}})
	f.Add(good)
	f.Add([]byte(`{"version":1,"id":"7478","phase":"committed","writes":[]}`))
	f.Add([]byte(`{"version":1,"id":"7478","phase":"prepared","writes":[{"family":"a","key":"6b","before":null,"after":{"revision":3,"value":1}}]}`))
	f.Add([]byte(`{"version":2,"id":"","phase":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := decodeJournal(b)
		if err != nil {
			return
		}
		for _, w := range j.Writes {
			if _, err := hex.DecodeString(w.Key); err != nil || validFamily(w.Family) != nil {
				t.Fatalf("accepted invalid record name %q/%q", w.Family, w.Key)
			}
			if w.After != nil && w.After.Revision != revisionOf(w.Before)+1 {
				t.Fatalf("accepted non-successor revision")
			}
		}
		again, err := encodeJournal(j)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		j2, err := decodeJournal(again)
		if err != nil || !reflect.DeepEqual(j, j2) {
			t.Fatalf("round trip: %+v\n%+v\n%v", j, j2, err)
		}
	})
}

func FuzzKeyFromName(f *testing.F) {
	for _, name := range []string{hexKey("k") + ".json", hexKey("k") + ".previous.json", hexKey("k") + ".next.json", "6B.json", ".json", "x.lock"} {
		f.Add(name)
	}
	f.Fuzz(func(t *testing.T, name string) {
		key, ok := keyFromName(name)
		if !ok {
			return
		}
		if validKey(key) != nil {
			t.Fatalf("%q yields invalid key %q", name, key)
		}
		if p := newRecordPaths("/r", "f", key); "/r/f/"+name != p.current && "/r/f/"+name != p.previous {
			t.Fatalf("%q is not a canonical name of key %q", name, key)
		}
	})
}
