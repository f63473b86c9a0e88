package sdk

import (
	"context"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Profiles macpd binds sessions to (docs/spec-decisions.md "Profiles").
// The profile is a runtime setting recorded per session at SessionStart;
// nothing on the wire carries it, so a client learns it from
// [Client.Profile] and tells a projection with [SessionView.Profile].
const (
	// ProfileApril is the April 2026 spec: CancelSession ends a session
	// EXPIRED. It is macpd's default and the profile of every runtime
	// that does not announce one.
	ProfileApril = "2026-04"
	// ProfileLatest is the newest spec macpd serves (2026-09): cancellation
	// ends a session CANCELLED and Decision sessions get the newest rules.
	ProfileLatest = "2026-09"
	// ProfileLatestAlias is the name "latest", which resolves to
	// ProfileLatest wherever a profile is configured.
	ProfileLatestAlias = "latest"
)

// ResolveProfile returns the profile named by name ("" and "2026-04" are
// ProfileApril; "latest" and "2026-09" are ProfileLatest), ok false for
// any other name.
func ResolveProfile(name string) (profile string, ok bool) {
	switch name {
	case "", ProfileApril:
		return ProfileApril, true
	case ProfileLatest, ProfileLatestAlias:
		return ProfileLatest, true
	}
	return "", false
}

// Profile returns the profile the runtime binds new sessions to, as
// announced by Initialize (experimental feature "macpd.profile"), and
// ProfileApril from a runtime that announces none.
func (c *Client) Profile(ctx context.Context) (string, error) {
	resp, err := c.Initialize(ctx)
	if err != nil {
		return "", err
	}
	p := resp.GetCapabilities().GetExperimental().GetFeatures()["macpd.profile"]
	if r, ok := ResolveProfile(p); ok {
		return r, nil
	}
	return p, nil
}

// SuspendSession moves an OPEN session to SUSPENDED (initiator only,
// RFC-MACP-0001 §7.5): the runtime accepts no message of the session until
// ResumeSession, and its TTL stops running. A session that is not OPEN is
// SESSION_NOT_OPEN. The Ack's session_state is the state reached.
func (c *Client) SuspendSession(ctx context.Context, sessionID, reason string) (*macpv1.Ack, error) {
	var resp *macpv1.SuspendSessionResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.SuspendSession(ctx, &macpv1.SuspendSessionRequest{SessionId: sessionID, Reason: reason})
		return err
	})
	if err != nil {
		return nil, err
	}
	if resp.GetAck() == nil {
		return nil, &Error{Code: CodeInternalError, Message: "the runtime answered SuspendSession without an ack"}
	}
	return resp.Ack, ackError(resp.Ack)
}

// ResumeSession moves a SUSPENDED session back to OPEN (initiator only,
// RFC-MACP-0001 §7.5) with the TTL it had left when suspended. A session
// that is not SUSPENDED is SESSION_NOT_OPEN; one suspended longer than its
// max_suspend_ms expires instead (SESSION_NOT_OPEN).
func (c *Client) ResumeSession(ctx context.Context, sessionID, reason string) (*macpv1.Ack, error) {
	var resp *macpv1.ResumeSessionResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.ResumeSession(ctx, &macpv1.ResumeSessionRequest{SessionId: sessionID, Reason: reason})
		return err
	})
	if err != nil {
		return nil, err
	}
	if resp.GetAck() == nil {
		return nil, &Error{Code: CodeInternalError, Message: "the runtime answered ResumeSession without an ack"}
	}
	return resp.Ack, ackError(resp.Ack)
}

// ListSessionsPage returns one page of the sessions the caller may see
// (macp-proto 0.1.6 pagination): at most pageSize sessions after the
// position pageToken names ("" for the first page), and the token of the
// next page, "" on the last one. pageSize 0 with no token lists every
// session in one page; a negative pageSize or a token the runtime did not
// issue is refused (gRPC InvalidArgument).
func (c *Client) ListSessionsPage(ctx context.Context, pageSize int32, pageToken string) (sessions []*macpv1.SessionMetadata, next string, err error) {
	var resp *macpv1.ListSessionsResponse
	err = c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.ListSessions(ctx, &macpv1.ListSessionsRequest{PageSize: pageSize, PageToken: pageToken})
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return resp.GetSessions(), resp.GetNextPageToken(), nil
}

// Suspend suspends the session (initiator only; see [Client.SuspendSession]).
func (s *Session) Suspend(ctx context.Context, reason string) (*macpv1.Ack, error) {
	return s.c.SuspendSession(ctx, s.ID, reason)
}

// Resume resumes the suspended session (initiator only; see
// [Client.ResumeSession]).
func (s *Session) Resume(ctx context.Context, reason string) (*macpv1.Ack, error) {
	return s.c.ResumeSession(ctx, s.ID, reason)
}
