package handoff_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	"github.com/macpd/macpd/internal/mode/handoff"
	"github.com/macpd/macpd/internal/mode/modetest"
)

// TestConformanceFixtures runs the spec's handoff_*.json fixtures
// (checklist CONF-26, CONF-27; the late HandoffContext of CONF-27 is
// refused, ⚠C7) at the mode level with handoff.New(). The core's part of a
// Commitment (authority, CONF-11 payload decoding) is emulated with
// policy.MayCommit; everything else is the mode's.
func TestConformanceFixtures(t *testing.T) {
	modetest.RunFixtures(t, handoff.New(), modetest.FixtureOptions{
		Glob:   "handoff_*.json",
		ModeID: handoff.ModeID,
		Payloads: map[string]func() proto.Message{
			"handoff.HandoffOffer":   func() proto.Message { return &handoffv1.HandoffOfferPayload{} },
			"handoff.HandoffContext": func() proto.Message { return &handoffv1.HandoffContextPayload{} },
			"handoff.HandoffAccept":  func() proto.Message { return &handoffv1.HandoffAcceptPayload{} },
			"handoff.HandoffDecline": func() proto.Message { return &handoffv1.HandoffDeclinePayload{} },
		},
	})
}
