package jsonscan

import (
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		keys string
	}{
		{`{}`, true, ""},
		{` { "a" : 1 , "b":"x,}\"y", "c":{"d":[1,{"e":"}"}]}, "f":null, "g":[] } `, true, "a,b,c,f,g"},
		{`{"a":1,"a":2}`, true, "a,a"},
		{`{"\u0061":1}`, false, ""},
		{`{"a":1`, false, "a"},
		{`{"a":}`, false, "a"},
		{`[1]`, false, ""},
		{`{"a":"unterminated}`, false, "a"},
		{`{"a":{"b":1}`, false, "a"},
		{`{"a":1 "b":2}`, false, "a"},
	} {
		var got []string
		ok := Keys([]byte(tc.in), func(n []byte) bool { got = append(got, string(n)); return true })
		if ok != tc.ok || (ok && strings.Join(got, ",") != tc.keys) {
			t.Errorf("%s: ok %v keys %v; want %v %q", tc.in, ok, got, tc.ok, tc.keys)
		}
	}
	n := 0
	if !Keys([]byte(`{"a":1,"b":2,"c":3}`), func([]byte) bool { n++; return n < 2 }) || n != 2 {
		t.Errorf("stop: n=%d", n)
	}
}
