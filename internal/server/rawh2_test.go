package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"
)

// rawUnary makes a unary gRPC call over plain HTTP/2 with an arbitrary
// authorization header value (grpc-go clients refuse non-ASCII metadata;
// other clients and proxies do not). It returns grpc-status.
func rawUnary(t *testing.T, addr, method, authorization string, req proto.Message) string {
	t.Helper()
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, a string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}}
	defer tr.CloseIdleConnections()
	b := mustMarshal(t, req)
	body := make([]byte, 5+len(b))
	binary.BigEndian.PutUint32(body[1:], uint32(len(b)))
	copy(body[5:], b)
	hr, err := http.NewRequest(http.MethodPost, "http://"+addr+"/macp.v1.MACPRuntimeService/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("content-type", "application/grpc")
	hr.Header.Set("te", "trailers")
	hr.Header["Authorization"] = []string{authorization}
	r, err := tr.RoundTrip(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	_, _ = io.Copy(io.Discard, r.Body)
	if s := r.Header.Get("grpc-status"); s != "" { // trailers-only response
		return s
	}
	return r.Trailer.Get("grpc-status")
}

// RFC-MACP-0004 §3 (sender derived from authenticated identity): an
// identity that is not valid UTF-8 is refused (16 = UNAUTHENTICATED).
// Before auth.ValidSender checked UTF-8 it was accepted as a sender, and
// the session it started - naming alice as participant - made every
// GetSession/ListSessions/WatchSessions of alice's fail with INTERNAL
// ("string field contains invalid UTF-8"), since proto3 strings must be
// UTF-8.
func TestNonUTF8IdentityRejected(t *testing.T) {
	e := startApp(t, testConfig())
	sid := uuid.NewString()
	req := &macpv1.SendRequest{Envelope: envelope(sid, "SessionStart", "m0", startPayload(t, "alice"))}
	if st := rawUnary(t, e.app.Addr(), "Send", "Bearer m\xffallory", req); st != "16" {
		t.Fatalf("grpc-status %q, want 16 (UNAUTHENTICATED)", st)
	}
	// The raw client itself works: a valid identity is accepted.
	if st := rawUnary(t, e.app.Addr(), "ListSessions", "Bearer alice", &macpv1.ListSessionsRequest{}); st != "0" {
		t.Fatalf("raw client broken: grpc-status %q", st)
	}
	if _, err := e.c.ListSessions(as("alice"), &macpv1.ListSessionsRequest{}); err != nil {
		t.Fatalf("alice's ListSessions: %v", err)
	}
}
