package snapshotio

import (
	"context"
	"errors"
	"fmt"
	"io"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/snapshot"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// FromRuntime reads a session's Input from a running runtime with only
// what a client may read, as the caller's identity (rpc carries its
// credentials): the accepted envelopes over a passive StreamSession from
// sequence 0, half-closed so the runtime ends the stream after the
// durable history, then the metadata (GetSession); if the metadata says
// the session ended, the envelopes are read again, so a terminal state
// always comes with its whole history (a session still OPEN in the
// metadata was OPEN when the envelopes were read). With decay > 0 it also
// lists the subsequent sessions (ListSessions: the ones the caller may
// observe, the same candidates as the HTTP report's for that caller). The
// protocol profile is the one macpd names in GetSession's response header
// coord.HeaderSessionProfile (asked for in the request); from a runtime
// that does not, snapshot.WireProfile's, with the profile the runtime's
// manifest (GetManifest) says it binds new sessions to. The Input equals
// the one the runtime's own history gives.
func FromRuntime(ctx context.Context, rpc macpv1.MACPRuntimeServiceClient, sessionID string, decay int) (snapshot.Input, []string, error) {
	envs, err := ReadHistory(ctx, rpc, sessionID)
	if err != nil {
		return snapshot.Input{}, nil, err
	}
	// The session's recorded profile, which SessionMetadata does not carry,
	// comes in a response header macpd sends when asked
	// (coord.HeaderSessionProfile).
	var hdr metadata.MD
	resp, err := rpc.GetSession(metadata.AppendToOutgoingContext(ctx, coord.HeaderSessionProfile, "1"),
		&macpv1.GetSessionRequest{SessionId: sessionID}, grpc.Header(&hdr))
	if err != nil {
		return snapshot.Input{}, nil, err
	}
	md := resp.GetMetadata()
	if md.GetState() != macpv1.SessionState_SESSION_STATE_OPEN {
		if envs, err = ReadHistory(ctx, rpc, sessionID); err != nil {
			return snapshot.Input{}, nil, err
		}
	}
	var sub []string
	if decay > 0 {
		var starts []snapshot.Start
		for token := ""; ; {
			page, err := rpc.ListSessions(ctx, &macpv1.ListSessionsRequest{PageToken: token})
			if err != nil {
				return snapshot.Input{}, nil, err
			}
			for _, m := range page.GetSessions() {
				starts = append(starts, snapshot.Start{SessionID: m.GetSessionId(), Initiator: m.GetInitiator(), Participants: m.GetParticipants(), AcceptedAtMs: m.GetStartedAtUnixMs()})
			}
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
		// The runtime listed only what the caller may observe.
		sub = snapshot.Subsequent(starts, sessionID, decay, snapshot.Viewer{Observer: true})
	}
	in := snapshot.InputFromWire(md, envs, "")
	if v := hdr.Get(coord.HeaderSessionProfile); len(v) == 1 {
		in.Profile = v[0]
		return in, sub, nil
	}
	// A runtime that does not answer the header: the profile as far as
	// the history shows it, else the one the runtime's manifest says it
	// binds new sessions to (snapshot.WireProfile).
	man, err := rpc.GetManifest(ctx, &macpv1.GetManifestRequest{})
	if err != nil {
		return snapshot.Input{}, nil, err
	}
	return snapshot.InputFromWire(md, envs, man.GetManifest().GetMetadata()["profile"]), sub, nil
}

// ReadHistory reads a session's accepted envelopes in sequence order over
// a passive StreamSession subscription from sequence 0 (heartbeats
// skipped). An in-stream MACPError ends it with that error.
func ReadHistory(ctx context.Context, rpc macpv1.MACPRuntimeServiceClient, sessionID string) ([]*macpv1.Envelope, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := rpc.StreamSession(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sessionID}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	var envs []*macpv1.Envelope
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return envs, nil
		}
		if err != nil {
			return nil, err
		}
		if e := resp.GetError(); e != nil {
			return nil, fmt.Errorf("%s: %s", e.GetCode(), e.GetMessage())
		}
		env := resp.GetEnvelope()
		if env == nil || env.GetSessionId() == "" {
			continue // heartbeat
		}
		envs = append(envs, env)
	}
}
