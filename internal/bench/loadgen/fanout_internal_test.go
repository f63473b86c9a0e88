package loadgen

import (
	"strings"
	"testing"
)

// verifyFanout fails a run unless every subscriber got the same envelopes
// in the same order, and the reference subscriber got every sent one
// exactly once, each sender's in its order.
func TestVerifyFanout(t *testing.T) {
	tally := func(ids ...string) *fanSub {
		s := &fanSub{ids: ids}
		var h uint64
		for _, id := range ids {
			h = chainHash(h, id)
		}
		s.hash.Store(h)
		s.n.Store(int64(len(ids)))
		return s
	}
	good := []string{"start", "pre", "w-0-0", "w-1-0", "m-1-0", "m-0-0", "m-0-1"}
	const total = 7
	for _, c := range []struct {
		name string
		subs []*fanSub
		want string // "" = ok
	}{
		{"ok", []*fanSub{tally(good...), tally(good...)}, ""},
		{"other order", []*fanSub{tally(good...), tally("start", "pre", "w-1-0", "w-0-0", "m-1-0", "m-0-0", "m-0-1")}, "same order"},
		{"missing", []*fanSub{tally(good[:6]...)}, "received 6"},
		{"duplicate", []*fanSub{tally("start", "pre", "w-0-0", "w-1-0", "m-1-0", "m-0-0", "m-0-0")}, "twice"},
		{"sender order", []*fanSub{tally("start", "pre", "w-0-0", "w-1-0", "m-1-0", "m-0-1", "m-0-0")}, "order"},
		{"not sent", []*fanSub{tally("start", "pre", "w-0-0", "w-1-0", "m-1-0", "m-0-0", "m-2-0")}, "sender 0's m envelopes"},
	} {
		err := verifyFanout(c.subs, total, 2, 2, 3)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
