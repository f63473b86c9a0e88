package server_test

import (
	"bytes"
	"testing"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// checklist ADM-10 ([RT]): a SendRequest without an envelope is a malformed
// request, INVALID_ARGUMENT (with INVALID_ENVELOPE as its MACP code), not an
// Ack.
func TestSendNilEnvelope(t *testing.T) {
	e := startApp(t, testConfig())
	_, err := e.c.Send(as("alice"), &macpv1.SendRequest{})
	wantStatus(t, err, codes.InvalidArgument, "INVALID_ENVELOPE")
}

// checklist ADM-11..23 and ADM-33 (RFC-MACP-0006 §3.1: Send reports
// rejection inside SendResponse.ack with gRPC OK), ADM-25 (the nack names
// the message and session), ADM-30 (a rejected envelope changes nothing):
// every error code of the envelope path, each leaving GetSession unchanged.
func TestSendRejectionsInAck(t *testing.T) {
	const maxPayload = 4096
	cfg := testConfig()
	cfg.MaxPayloadBytes = maxPayload
	e := startApp(t, cfg)
	sid := e.startSession(t, "alice", "alice", "bob")
	e.mustAccept(t, "alice", envelope(sid, "Proposal", "p0", proposalPayload(t, "p0")))
	closed := e.startSession(t, "alice", "alice", "bob")
	e.resolve(t, "alice", closed)

	type tc struct {
		name, agent string
		env         *macpv1.Envelope
		code        string
		// sid the envelope addresses; "" means the session must not exist
		// afterwards.
		existing string
	}
	v2 := envelope(sid, "Proposal", "m-v2", proposalPayload(t, "p1"))
	v2.MacpVersion = "2.0"
	noVersion := envelope(sid, "Proposal", "m-nov", proposalPayload(t, "p1"))
	noVersion.MacpVersion = ""
	noID := envelope(sid, "Proposal", "", proposalPayload(t, "p1"))
	noType := envelope(sid, "", "m-notype", proposalPayload(t, "p1"))
	noMode := envelope(sid, "Proposal", "m-nomode", proposalPayload(t, "p1"))
	noMode.Mode = ""
	otherMode := envelope(sid, "Proposal", "m-othermode", proposalPayload(t, "p1"))
	otherMode.Mode = "macp.mode.task.v1"
	badPayload := envelope(sid, "Proposal", "m-badpayload", []byte{0xff, 0xff, 0xff})
	scopedSignal := envelope(sid, "Signal", "m-sig", mustMarshal(t, &macpv1.SignalPayload{SignalType: "x"}))
	badSID := envelope("short-id", "SessionStart", "m-badsid", startPayload(t, "alice"))
	upperUUID := envelope("6F1C0B8E-5A3B-4C2D-9E1F-0A1B2C3D4E5F", "SessionStart", "m-upper", startPayload(t, "alice"))
	newSID := uuid.NewString()
	badMode := envelope(newSID, "SessionStart", "m-badmode", startPayload(t, "alice"))
	badMode.Mode = "macp.mode.nope.v1"
	unknown := envelope(uuid.NewString(), "Proposal", "m-unknown", proposalPayload(t, "p1"))
	again := envelope(sid, "SessionStart", "m-again", startPayload(t, "alice", "bob"))
	cancel := envelope(sid, "SessionCancel", "m-cancel", mustMarshal(t, &macpv1.SessionCancelPayload{Reason: "x", CancelledBy: "alice"}))
	big := envelope(sid, "Proposal", "m-big", append(proposalPayload(t, "p1"), bytes.Repeat([]byte{0}, maxPayload)...))
	late := envelope(closed, "Proposal", "m-late", proposalPayload(t, "p9"))

	cases := []tc{
		{"ADM-11/INIT-4 version 2.0", "alice", v2, "UNSUPPORTED_PROTOCOL_VERSION", sid},
		{"ADM-11 empty version", "alice", noVersion, "UNSUPPORTED_PROTOCOL_VERSION", sid},
		{"ADM-1 empty message_id", "alice", noID, "INVALID_ENVELOPE", sid},
		{"ADM-1 empty message_type", "alice", noType, "INVALID_ENVELOPE", sid},
		{"ADM-1 session_id without mode", "alice", noMode, "INVALID_ENVELOPE", sid},
		{"ADM-18 mode mismatch", "alice", otherMode, "INVALID_ENVELOPE", sid},
		{"ADM-22 undecodable payload", "alice", badPayload, "INVALID_ENVELOPE", sid},
		{"SIG-5 session-scoped Signal", "alice", scopedSignal, "INVALID_ENVELOPE", sid},
		{"START-2 short session_id", "alice", badSID, "INVALID_SESSION_ID", ""},
		{"START-2 uppercase UUID", "alice", upperUUID, "INVALID_SESSION_ID", ""},
		{"START-3 unknown mode", "alice", badMode, "MODE_NOT_SUPPORTED", ""},
		{"ADM-16 unknown session", "alice", unknown, "SESSION_NOT_FOUND", ""},
		{"START-7 session exists", "alice", again, "SESSION_ALREADY_EXISTS", sid},
		{"START-7 session exists, other sender", "bob", again, "SESSION_ALREADY_EXISTS", sid},
		{"CANCEL-5 SessionCancel via Send", "alice", cancel, "FORBIDDEN", sid},
		{"ADM-21 non-participant", "mallory", envelope(sid, "Proposal", "m-mallory", proposalPayload(t, "p1")), "FORBIDDEN", sid},
		{"ADM-21 non-initiator Commitment", "bob", envelope(sid, "Commitment", "m-bobc", commitmentPayload(t)), "FORBIDDEN", sid},
		{"ADM-3 payload over MACP_MAX_PAYLOAD_BYTES", "alice", big, "PAYLOAD_TOO_LARGE", sid},
		{"ADM-20 resolved session", "alice", late, "SESSION_NOT_OPEN", closed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before *macpv1.SessionMetadata
			if c.existing != "" {
				before = e.getSession(t, "alice", c.existing)
			}
			ack := e.send(t, c.agent, c.env)
			wantNack(t, ack, c.code)
			if ack.MessageId != c.env.MessageId || ack.SessionId != c.env.SessionId ||
				ack.Error.MessageId != c.env.MessageId || ack.Error.SessionId != c.env.SessionId {
				t.Errorf("nack does not name the envelope: %v", ack)
			}
			if ack.Error.Message == "" {
				t.Errorf("nack without message: %v", ack)
			}
			if c.existing == "" {
				_, err := e.c.GetSession(as("alice"), &macpv1.GetSessionRequest{SessionId: c.env.SessionId})
				if c.code == "INVALID_SESSION_ID" {
					wantStatus(t, err, codes.InvalidArgument, "INVALID_SESSION_ID")
				} else {
					wantStatus(t, err, codes.NotFound, "SESSION_NOT_FOUND")
				}
				return
			}
			if after := e.getSession(t, "alice", c.existing); !proto.Equal(before, after) {
				t.Errorf("rejected envelope changed the session\nbefore %v\n after %v", before, after)
			}
		})
	}

	// ADM-30: a rejected envelope does not consume its message_id; it may
	// be re-sent and is then accepted, not reported as a duplicate.
	fixed := envelope(sid, "Proposal", "m-big", proposalPayload(t, "p1"))
	if ack := e.mustAccept(t, "alice", fixed); ack.Duplicate {
		t.Fatalf("re-sent rejected message_id reported as duplicate: %v", ack)
	}
}

// checklist IDEM-1/IDEM-2, ADM-17: a re-sent accepted envelope is acked
// ok+duplicate and has no side effects.
func TestSendDuplicateHasNoEffect(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "alice", "alice", "bob")
	p := envelope(sid, "Proposal", "m1", proposalPayload(t, "p1"))
	e.mustAccept(t, "alice", p)
	before := e.getSession(t, "alice", sid)
	ack := e.mustAccept(t, "alice", p)
	if !ack.Duplicate || ack.SessionState != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("resend: %v", ack)
	}
	if after := e.getSession(t, "alice", sid); !proto.Equal(before, after) {
		t.Fatalf("duplicate changed the session\nbefore %v\n after %v", before, after)
	}
}

// checklist SEC-6, ADM-3; server.Options.MaxRecvBytes: a request frame far
// above the payload limit is refused by gRPC (RESOURCE_EXHAUSTED) before it
// is decoded, so it never reaches admission; the connection stays usable.
func TestSendOversizedFrameRefused(t *testing.T) {
	const maxPayload = 4096
	cfg := testConfig()
	cfg.MaxPayloadBytes = maxPayload
	e := startApp(t, cfg)
	sid := e.startSession(t, "alice", "alice", "bob")
	before := e.getSession(t, "alice", sid)
	huge := envelope(sid, "Proposal", "m-huge", append(proposalPayload(t, "p1"), bytes.Repeat([]byte{0}, 1<<20)...))
	_, err := e.c.Send(as("alice"), &macpv1.SendRequest{Envelope: huge})
	wantStatus(t, err, codes.ResourceExhausted, "")
	if after := e.getSession(t, "alice", sid); !proto.Equal(before, after) {
		t.Fatalf("oversized frame changed the session")
	}
	// The same message_id was never seen: a proper resend is accepted.
	if ack := e.mustAccept(t, "alice", envelope(sid, "Proposal", "m-huge", proposalPayload(t, "p1"))); ack.Duplicate {
		t.Fatalf("refused frame consumed the message_id: %v", ack)
	}
}
