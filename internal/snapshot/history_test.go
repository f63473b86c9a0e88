package snapshot_test

import (
	"reflect"
	"testing"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/snapshot"
)

// The server path (stored history, no replay) and the replay path give
// the same Input.
func TestInputFromHistoryEqualsReplay(t *testing.T) {
	for _, h := range []*hist{
		resolved(t, sidA),
		newHist(t, startOpts{id: sidB}).propose("x"),
		newHist(t, startOpts{id: sidC}).cancel("stop"),
		newHist(t, startOpts{id: sidD}).propose("x").expire(),
		// Profile 2026-09 and suspension (issue 31): a cancel ends it
		// CANCELLED, a suspension leaves it SUSPENDED, a resume OPEN.
		newHist(t, startOpts{id: sidC, profile: "latest"}).cancel("stop"),
		newHist(t, startOpts{id: sidB, profile: "latest"}).propose("x").suspend("pause", "s-1", 5),
		newHist(t, startOpts{id: sidB}).propose("x").suspend("pause", "s-1", 5).resume("go", "r-1", 9),
	} {
		a, err := snapshot.InputFromHistory(h.recs)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := snapshot.InputFromRecords(h.recs, registry(), limits)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: history %+v\nreplay %+v", h.s.ID, a, b)
		}
		// Records written without a status give the same state.
		bare := append([]session.Record(nil), h.recs...)
		for i := range bare {
			bare[i].Status = 0
		}
		if c, err := snapshot.InputFromHistory(bare); err != nil || c.State != b.State {
			t.Errorf("%s: without stored status: %v, %v", h.s.ID, c.State, err)
		}
	}
}
