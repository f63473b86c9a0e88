// Package httpapi is macpd's HTTP binding (RFC-MACP-0006 §4), its
// Server-Sent Events feed, the official Python SDK's polling feed and the
// WebSocket binding (§5), on one listener beside gRPC. It is a thin
// adapter: every request is authenticated by the same auth.Authenticator
// as gRPC (bearer tokens, JWT, client certificates, dev identities), and
// every envelope goes through runtime.Send, the same admission path as
// gRPC Send (validation, authorization matrix, rate limits, ordering,
// durable-before-ack), or on a WebSocket runtime.SendPipelined, the same
// path split as on a gRPC StreamSession. Reads use runtime.GetSession / ListSessionsPage,
// the control routes runtime.Cancel / Suspend / Resume (the initiator
// only, as gRPC), and every feed follows a session through
// runtime.Follow, in one place (follow.go), so all transports share one
// cursor: the session's sequence number (docs/resume.md). A SUSPENDED
// session is live on every feed (it may be resumed); RESOLVED, EXPIRED
// and CANCELLED are terminal.
//
// Routes (README "HTTP and WebSocket bindings"; docs/security.md):
//
//	POST /macp/envelope              Envelope JSON -> Ack JSON
//	POST /macp/session/start         SessionStart Envelope JSON -> Ack JSON
//	GET  /macp/session/{id}          SessionMetadata JSON
//	POST /macp/session/{id}/cancel   {"reason": "..."} -> Ack JSON (CancelSession: EXPIRED under 2026-04, CANCELLED under latest)
//	POST /macp/session/{id}/suspend  {"reason": "..."} -> Ack JSON (SuspendSession: OPEN -> SUSPENDED)
//	POST /macp/session/{id}/resume   {"reason": "..."} -> Ack JSON (ResumeSession: SUSPENDED -> OPEN)
//	GET  /macp/session/{id}/resolution  Resolution JSON: bound profile, Commitment and its commitment hash (resolution.go)
//	GET  /macp/session/{id}/events   SSE: id = sequence number, data = Envelope JSON
//	GET  /macp/sessions              ListSessionsResponse JSON; ?page_size=N&page_token=T pages it (as gRPC)
//	GET  /macp/sessions/events       SSE: lifecycle events of the sessions the caller may observe (lifecycle.go)
//	GET  /macp/modes                 ListModesResponse JSON (no credentials needed)
//	GET  /macp/policies              ListPoliciesResponse JSON
//	GET  /.well-known/macp.json      the runtime's AgentManifest (no credentials needed)
//	POST /macp/auth/ticket           a short-lived single-use ticket for browsers
//	GET  /macp/ws                    WebSocket, JSON-RPC 2.0 (ws.go; protocol-mode sessions: resume.go);
//	                                 pipelined macp/send (wspipe.go), the macp.v1+proto binary subprotocol (ws_binary.go)
//	POST /macp/rpc                   JSON-RPC 2.0 over HTTP, the same methods (rpc.go)
//	GET  /macp/rpc/stream            SSE stream of /macp/rpc notifications
//	GET  /sessions/{id}/events?after=N  polling feed (Python SDK HttpTransportAdapter)
//
// Errors: the status is the HTTP Status column of the spec's error-code
// registry for the MACP code (wire.HTTPStatus), and the body is a JSON
// MACPError. A rejected envelope answers its Ack's error that way; an
// accepted envelope or a duplicate is 200 with the Ack.
//
// Bounds: request bodies (twice the payload limit plus 64 KiB), header
// size, read-header and idle timeouts, per-identity stream slots and
// per-session stream slots (the gRPC settings' values, counted separately
// per listener), WebSocket subscriptions per connection, outstanding
// pipelined macp/send requests per connection (WSSendWindow), message size and
// outgoing queue, a write timeout on every streamed event, and a cap on
// outstanding browser tickets.
//
// Extra routes (snapshots, a console) are added with Server.Handle before
// Serve; they can use Server.Identify, WriteError and WriteJSON so they
// authenticate and answer errors exactly like the built-in routes.
package httpapi
