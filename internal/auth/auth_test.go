package auth

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/coord"
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
		c := &Credentials{Authorization: tc.vals}
		if got := c.BearerToken(); got != tc.want {
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

// creds builds the Credentials of header key/value pairs.
func creds(kv ...string) *Credentials {
	c := &Credentials{}
	for i := 0; i+1 < len(kv); i += 2 {
		switch kv[i] {
		case "authorization":
			c.Authorization = append(c.Authorization, kv[i+1])
		case "x-macp-agent-id":
			c.AgentID = append(c.AgentID, kv[i+1])
		case "x-macp-token":
			c.Token = append(c.Token, kv[i+1])
		default:
			panic("creds: unknown header " + kv[i])
		}
	}
	return c
}

// checklist SEC-2 ([RT] dev identities): the bearer token or, without one,
// the x-macp-agent-id header is the agent id; Caps are granted as
// configured; no credentials is ErrNoCredentials so a Chain can try the
// next authenticator; an unusable id is UNAUTHENTICATED.
func TestDev(t *testing.T) {
	caps := coord.Capabilities{CanManageModeRegistry: true}
	d := Dev{Caps: caps}
	ctx := context.Background()
	for _, tc := range []struct {
		c    *Credentials
		want string
	}{
		{creds("authorization", "Bearer alice"), "alice"},
		{creds("x-macp-agent-id", "bob"), "bob"},
		{creds("x-macp-agent-id", "  bob  "), "bob"},
		{creds("authorization", "Bearer alice", "x-macp-agent-id", "bob"), "alice"},
		{creds("authorization", "Basic xyz", "x-macp-agent-id", "bob"), "bob"},
	} {
		id, err := d.Authenticate(ctx, tc.c)
		if err != nil || id.Sender != tc.want || !id.Caps.CanManageModeRegistry {
			t.Errorf("Authenticate(%+v) = %+v, %v; want %s", tc.c, id, err, tc.want)
		}
	}
	for _, m := range []*Credentials{nil, creds(), creds("authorization", "Bearer "), creds("x-macp-agent-id", ""), creds("x-macp-agent-id", "   "), creds("x-macp-token", "alice")} {
		if _, err := d.Authenticate(ctx, m); !errors.Is(err, ErrNoCredentials) {
			t.Errorf("Authenticate(%v) err %v, want ErrNoCredentials", m, err)
		}
	}
	for _, m := range []*Credentials{creds("authorization", "Bearer _runtime"), creds("x-macp-agent-id", "_runtime"), creds("authorization", "Bearer "+strings.Repeat("x", 300))} {
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

func (f fixed) Authenticate(context.Context, *Credentials) (coord.Identity, error) {
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

// TestCollect: the authenticators see the headers they read (Headers)
// and nothing else; with a bearer token only it (every authenticator
// prefers it), and the other headers are not even looked up.
func TestCollect(t *testing.T) {
	headers := func(h map[string][]string, asked *[]string) func(string) []string {
		return func(k string) []string {
			*asked = append(*asked, k)
			return h[k]
		}
	}
	var asked []string
	var c Credentials
	Collect(&c, headers(map[string][]string{
		"authorization":   {"Bearer alice"},
		"x-macp-agent-id": {"bob"},
		"x-macp-token":    {"tok"},
		"user-agent":      {"grpc-go"},
	}, &asked))
	if len(asked) != 1 || len(c.Authorization) != 1 || c.AgentID != nil || c.Token != nil {
		t.Fatalf("with a bearer token: asked %v, got %+v", asked, c)
	}
	if id, err := (Dev{}).Authenticate(context.Background(), &c); err != nil || id.Sender != "alice" {
		t.Fatalf("Authenticate = %+v, %v", id, err)
	}
	// Without one (another scheme) it reads the other headers too.
	asked, c = nil, Credentials{}
	Collect(&c, headers(map[string][]string{
		"authorization":   {"Basic abc"},
		"x-macp-agent-id": {"bob"},
		"x-macp-token":    {"tok"},
		"x-other":         {"v"},
	}, &asked))
	if len(asked) != 3 || c.Authorization[0] != "Basic abc" || c.AgentID[0] != "bob" || c.Token[0] != "tok" {
		t.Fatalf("asked %v, got %+v", asked, c)
	}
	if id, err := (Dev{}).Authenticate(context.Background(), &c); err != nil || id.Sender != "bob" {
		t.Fatalf("Authenticate = %+v, %v", id, err)
	}
	// The bearer-first rule the shortcut relies on, for each authenticator
	// that reads another header: with a bearer token present, that header
	// makes no difference.
	tokens, err := NewTokens(TokensOptions{JSON: `[{"token": "good-token-0123456789", "sender": "carol"}]`})
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]Authenticator{"dev": Dev{}, "tokens": tokens} {
		with := creds("authorization", "Bearer good-token-0123456789", "x-macp-agent-id", "bob", "x-macp-token", "other")
		without := creds("authorization", "Bearer good-token-0123456789")
		id1, err1 := a.Authenticate(context.Background(), with)
		id2, err2 := a.Authenticate(context.Background(), without)
		if id1.Sender != id2.Sender || (err1 == nil) != (err2 == nil) {
			t.Fatalf("%s: other headers change the outcome despite a bearer token: %+v %v / %+v %v", name, id1, err1, id2, err2)
		}
	}
	asked, c = nil, Credentials{}
	Collect(&c, headers(nil, &asked))
	if _, err := (Chain{Dev{}, tokens}).Authenticate(context.Background(), &c); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("without headers = %v, want ErrNoCredentials", err)
	}
}
