package auth

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc/metadata"
)

// checklist SEC-2: the de-facto credential is "authorization: Bearer
// <token>"; the scheme is case-insensitive (RFC 6750 §2.1, RFC 9110 §11.1).
func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		vals []string
		want string
	}{
		{[]string{"Bearer alice"}, "alice"},
		{[]string{"bearer alice"}, "alice"},
		{[]string{"BEARER alice"}, "alice"},
		{[]string{"Bearer   alice  "}, "alice"},
		{[]string{"Bearer a.b.c"}, "a.b.c"},
		{[]string{"Bearer"}, ""},
		{[]string{"Bearer "}, ""},
		{[]string{"Bearer    "}, ""},
		{[]string{"Basic YWxpY2U6cHc="}, ""},
		{[]string{"Beareralice"}, ""},
		{[]string{"alice"}, ""},
		{[]string{"Basic x", "Bearer bob"}, "bob"},
		{nil, ""},
	} {
		md := metadata.MD{}
		for _, v := range tc.vals {
			md.Append("authorization", v)
		}
		if got := BearerToken(md); got != tc.want {
			t.Errorf("BearerToken(%q) = %q, want %q", tc.vals, got, tc.want)
		}
	}
}

// RFC-MACP-0004 §3 and coord.RuntimeSender: what may be an authenticated
// sender id.
func TestValidSender(t *testing.T) {
	for _, s := range []string{"alice", "a", "agent://fraud/1", "agent-1_x.y@z", "агент", "a b", strings.Repeat("x", 256)} {
		if !ValidSender(s) {
			t.Errorf("ValidSender(%q) = false", s)
		}
	}
	for _, s := range []string{
		"", "_runtime", "_", "_x",
		" alice", "alice ", "\talice",
		"a\nb", "a\x00b", "a\x7fb", "a\u200bb", // control / invisible format characters
		strings.Repeat("x", 257),
		"\xff", "alice\xc3", "a\xc0\xafb", // not UTF-8: cannot travel in a proto3 string field
	} {
		if ValidSender(s) {
			t.Errorf("ValidSender(%q) = true", s)
		}
	}
}

func md(kv ...string) metadata.MD { return metadata.Pairs(kv...) }

// checklist SEC-2 ([RT] dev identities): the bearer token or, without one,
// the x-macp-agent-id header is the agent id; Caps are granted as
// configured; no credentials is ErrNoCredentials so a Chain can try the
// next authenticator; an unusable id is UNAUTHENTICATED.
func TestDev(t *testing.T) {
	caps := coord.Capabilities{CanManageModeRegistry: true}
	d := Dev{Caps: caps}
	ctx := context.Background()
	for _, tc := range []struct {
		md   metadata.MD
		want string
	}{
		{md("authorization", "Bearer alice"), "alice"},
		{md("x-macp-agent-id", "bob"), "bob"},
		{md("x-macp-agent-id", "  bob  "), "bob"},
		{md("authorization", "Bearer alice", "x-macp-agent-id", "bob"), "alice"},
		{md("authorization", "Basic xyz", "x-macp-agent-id", "bob"), "bob"},
	} {
		id, err := d.Authenticate(ctx, tc.md)
		if err != nil || id.Sender != tc.want || !id.Caps.CanManageModeRegistry {
			t.Errorf("Authenticate(%v) = %+v, %v; want %s", tc.md, id, err, tc.want)
		}
	}
	for _, m := range []metadata.MD{nil, md(), md("authorization", "Bearer "), md("x-macp-agent-id", ""), md("x-macp-agent-id", "   "), md("x-macp-token", "alice")} {
		if _, err := d.Authenticate(ctx, m); !errors.Is(err, ErrNoCredentials) {
			t.Errorf("Authenticate(%v) err %v, want ErrNoCredentials", m, err)
		}
	}
	for _, m := range []metadata.MD{md("authorization", "Bearer _runtime"), md("x-macp-agent-id", "_runtime"), md("authorization", "Bearer "+strings.Repeat("x", 300))} {
		_, err := d.Authenticate(ctx, m)
		if coord.CodeOf(err) != coord.CodeUnauthenticated || errors.Is(err, ErrNoCredentials) {
			t.Errorf("Authenticate(%v) err %v, want UNAUTHENTICATED", m, err)
		}
	}
}

type fixed struct {
	id  coord.Identity
	err error
	n   *int
}

func (f fixed) Authenticate(context.Context, metadata.MD) (coord.Identity, error) {
	if f.n != nil {
		*f.n++
	}
	return f.id, f.err
}

// auth/doc.go: a Chain tries authenticators in order, skipping those that
// find no credentials, and stops at the first identity or rejection.
func TestChain(t *testing.T) {
	ctx := context.Background()
	none := fixed{err: ErrNoCredentials}
	reject := fixed{err: coord.Errorf(coord.CodeUnauthenticated, "expired token")}
	alice := fixed{id: coord.Identity{Sender: "alice"}}
	var calls int
	counting := fixed{id: coord.Identity{Sender: "bob"}, n: &calls}

	if _, err := (Chain{}).Authenticate(ctx, nil); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("empty chain: %v", err)
	}
	if _, err := (Chain{none, none}).Authenticate(ctx, nil); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("all without credentials: %v", err)
	}
	if id, err := (Chain{none, alice, counting}).Authenticate(ctx, nil); err != nil || id.Sender != "alice" || calls != 0 {
		t.Errorf("first identity wins: %+v %v (later called %d times)", id, err, calls)
	}
	if _, err := (Chain{reject, alice}).Authenticate(ctx, nil); coord.CodeOf(err) != coord.CodeUnauthenticated {
		t.Errorf("a rejection stops the chain: %v", err)
	}
	if _, err := (Chain{none, reject, counting}).Authenticate(ctx, nil); coord.CodeOf(err) != coord.CodeUnauthenticated || calls != 0 {
		t.Errorf("a rejection stops the chain: %v (later called %d times)", err, calls)
	}
	wrapped := fixed{err: errors.Join(errors.New("ctx"), ErrNoCredentials)}
	if id, err := (Chain{wrapped, alice}).Authenticate(ctx, nil); err != nil || id.Sender != "alice" {
		t.Errorf("wrapped ErrNoCredentials is skipped: %+v %v", id, err)
	}
}

// TestAuthenticateIncoming: the authenticators see the headers they read
// (Headers), whatever their case on the wire, and nothing else; with a
// bearer token only it (every authenticator prefers it); the recycled map
// carries nothing from one call to the next.
func TestAuthenticateIncoming(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{
		"authorization":   {"Bearer alice"},
		"X-Macp-Agent-Id": {"bob"},
		"x-macp-token":    {"tok"},
		"user-agent":      {"grpc-go"},
		"x-other":         {"v"},
	})
	var seen metadata.MD
	spy := authFunc(func(md metadata.MD) (coord.Identity, error) {
		seen = md.Copy()
		return Dev{}.Authenticate(context.Background(), md)
	})
	if id, err := AuthenticateIncoming(ctx, spy); err != nil || id.Sender != "alice" {
		t.Fatalf("AuthenticateIncoming = %+v, %v", id, err)
	}
	if len(seen) != 1 || seen.Get("authorization")[0] != "Bearer alice" {
		t.Fatalf("with a bearer token the authenticator saw %v", seen)
	}
	// Without one (another scheme) it sees the other headers too.
	ctx = metadata.NewIncomingContext(context.Background(), metadata.MD{
		"authorization":   {"Basic abc"},
		"X-Macp-Agent-Id": {"bob"},
		"x-macp-token":    {"tok"},
		"x-other":         {"v"},
	})
	if id, err := AuthenticateIncoming(ctx, spy); err != nil || id.Sender != "bob" {
		t.Fatalf("AuthenticateIncoming = %+v, %v", id, err)
	}
	if len(seen) != 3 || seen.Get("authorization")[0] != "Basic abc" || seen.Get("x-macp-agent-id")[0] != "bob" || seen.Get("x-macp-token")[0] != "tok" {
		t.Fatalf("authenticator saw %v", seen)
	}
	// The bearer-first rule the shortcut relies on, for each authenticator
	// that reads another header: with a bearer token present, that header
	// makes no difference.
	tokens, err := NewTokens(TokensOptions{JSON: `[{"token": "good-token-0123456789", "sender": "carol"}]`})
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]Authenticator{"dev": Dev{}, "tokens": tokens} {
		with := metadata.MD{"authorization": {"Bearer good-token-0123456789"}, "x-macp-agent-id": {"bob"}, "x-macp-token": {"other"}}
		without := metadata.MD{"authorization": {"Bearer good-token-0123456789"}}
		id1, err1 := a.Authenticate(context.Background(), with)
		id2, err2 := a.Authenticate(context.Background(), without)
		if id1.Sender != id2.Sender || (err1 == nil) != (err2 == nil) {
			t.Fatalf("%s: other headers change the outcome despite a bearer token: %+v %v / %+v %v", name, id1, err1, id2, err2)
		}
	}
	ctx = metadata.NewIncomingContext(context.Background(), metadata.MD{"x-macp-agent-id": {"bob"}})
	if id, err := AuthenticateIncoming(ctx, spy); err != nil || id.Sender != "bob" || len(seen) != 1 {
		t.Fatalf("by agent id = %+v, %v (saw %v)", id, err, seen)
	}
	if _, err := AuthenticateIncoming(context.Background(), spy); !errors.Is(err, ErrNoCredentials) || len(seen) != 0 {
		t.Fatalf("without metadata = %v (saw %v), want ErrNoCredentials", err, seen)
	}
}

type authFunc func(metadata.MD) (coord.Identity, error)

func (f authFunc) Authenticate(_ context.Context, md metadata.MD) (coord.Identity, error) {
	return f(md)
}
