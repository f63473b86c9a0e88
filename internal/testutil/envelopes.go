package testutil

import (
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
)

// The Decision mode's names, as literals: testutil is imported by the
// tests of the packages that define them (TestNamesMatchTheCore holds
// them to the core's).
const (
	ProtocolVersion   = "1.0"
	DecisionMode      = "macp.mode.decision.v1"
	DecisionVersion   = "1.0.0"
	DefaultCfgVersion = "cfg-1"
)

// Marshal encodes m, panicking on failure (test messages always encode).
func Marshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// DecisionEnv is an envelope of type typ in a Decision session, stamped
// now.
func DecisionEnv(sid, msgID, typ string, payload []byte) *macpv1.Envelope {
	return &macpv1.Envelope{
		MacpVersion: ProtocolVersion, Mode: DecisionMode, MessageType: typ,
		MessageId: msgID, SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: payload,
	}
}

// DecisionStart is a valid Decision SessionStart with the given TTL and
// participants, bound to DefaultCfgVersion.
func DecisionStart(sid, msgID string, ttlMs int64, participants ...string) *macpv1.Envelope {
	return DecisionEnv(sid, msgID, "SessionStart", Marshal(&macpv1.SessionStartPayload{
		Intent: "decide", Participants: participants,
		ModeVersion: DecisionVersion, ConfigurationVersion: DefaultCfgVersion, TtlMs: ttlMs,
	}))
}

// DecisionProposal proposes option proposal_id "p-"+msgID (unique per
// message).
func DecisionProposal(sid, msgID string) *macpv1.Envelope {
	return DecisionEnv(sid, msgID, "Proposal",
		Marshal(&decisionv1.ProposalPayload{ProposalId: "p-" + msgID, Option: "option " + msgID, Rationale: "r"}))
}

// DecisionVote approves proposalID.
func DecisionVote(sid, msgID, proposalID string) *macpv1.Envelope {
	return DecisionEnv(sid, msgID, "Vote",
		Marshal(&decisionv1.VotePayload{ProposalId: proposalID, Vote: "APPROVE", Reason: "ok"}))
}

// DecisionRejection is a valid negative Commitment (allowed once a
// proposal exists) with commitment_id cid.
func DecisionRejection(sid, msgID, cid string) *macpv1.Envelope {
	return DecisionEnv(sid, msgID, "Commitment", Marshal(&macpv1.CommitmentPayload{
		CommitmentId: cid, Action: "decision.rejected", AuthorityScope: "test", Reason: "done",
		ModeVersion: DecisionVersion, ConfigurationVersion: DefaultCfgVersion, OutcomePositive: false,
	}))
}
