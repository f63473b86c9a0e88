package auth

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/coord"
)

// The reference runtime's token format, both forms, with its capability
// names and defaults mapped onto coord.Capabilities.
func TestParseTokens(t *testing.T) {
	list := `[
	  {"token": "secret-token-for-analyst", "sender": "agent://analyst",
	   "allowed_modes": ["macp.mode.decision.v1", "macp.mode.task.v1"], "can_start_sessions": true,
	   "max_open_sessions": 10, "can_manage_mode_registry": false, "is_observer": false},
	  {"token": "secret-token-for-reviewer", "sender": "agent://reviewer", "allowed_modes": [],
	   "can_start_sessions": true, "can_manage_mode_registry": false},
	  {"token": "secret-token-for-auditor", "sender": "agent://auditor", "can_start_sessions": false, "is_observer": true},
	  {"token": "secret-token-for-admin!", "sender": "admin", "can_manage_mode_registry": true, "max_open_sessions": null},
	  {"token": "secret-token-for-nobody", "sender": "nobody", "max_open_sessions": 0}
	]`
	want := []StaticToken{
		{"secret-token-for-analyst", coord.Identity{Sender: "agent://analyst", Caps: coord.Capabilities{
			AllowedModes: []string{"macp.mode.decision.v1", "macp.mode.task.v1"}, MaxOpenSessions: 10}}},
		{"secret-token-for-reviewer", coord.Identity{Sender: "agent://reviewer"}},
		{"secret-token-for-auditor", coord.Identity{Sender: "agent://auditor", Caps: coord.Capabilities{CannotStartSessions: true, IsObserver: true}}},
		{"secret-token-for-admin!", coord.Identity{Sender: "admin", Caps: coord.Capabilities{CanManageModeRegistry: true}}},
		{"secret-token-for-nobody", coord.Identity{Sender: "nobody", Caps: coord.Capabilities{CannotStartSessions: true}}},
	}
	for _, doc := range []string{list, `{"tokens": ` + list + `}`, "\n  " + list + "\n"} {
		got, warnings, err := ParseTokens([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || len(warnings) != 0 {
			t.Fatalf("ParseTokens\n got %+v\nwant %+v\nwarnings %v", got, want, warnings)
		}
	}
	// Empty allowed_modes means every mode (reference runtime).
	if !want[1].Identity.Caps.AllowsMode("anything") || want[0].Identity.Caps.AllowsMode("macp.mode.quorum.v1") {
		t.Fatal("allowed_modes mapping")
	}
	for _, doc := range []string{`[]`, `{"tokens": []}`} {
		if got, _, err := ParseTokens([]byte(doc)); err != nil || len(got) != 0 {
			t.Errorf("%s: %v %v", doc, got, err)
		}
	}
	_, warnings, err := ParseTokens([]byte(`[{"token": "short", "sender": "a", "can_start_session": false}]`))
	if err != nil || len(warnings) != 2 || !strings.Contains(strings.Join(warnings, "\n"), `"can_start_session"`) {
		t.Fatalf("warnings %q, err %v", warnings, err)
	}
}

func TestParseTokensErrors(t *testing.T) {
	for doc, want := range map[string]string{
		``:                                       "empty",
		`   `:                                    "empty",
		`nope`:                                   "JSON array",
		`"tok"`:                                  "JSON array",
		`[`:                                      "token list",
		`{"token": "x"}`:                         `no "tokens"`,
		`{"tokens": 3}`:                          "token list",
		`[3]`:                                    "entry 0",
		`[{"sender": "a"}]`:                      `"token" is missing`,
		`[{"token": "", "sender": "a"}]`:         `"token" is missing`,
		`[{"token": " padded ", "sender": "a"}]`: "white space",
		`[{"token": "tttttttttttttttt"}]`:        `"sender" is missing`,
		`[{"token": "tttttttttttttttt", "sender": ""}]`:                                                "not a valid sender",
		`[{"token": "tttttttttttttttt", "sender": "_runtime"}]`:                                        "not a valid sender",
		`[{"token": "tttttttttttttttt", "sender": 7}]`:                                                 "entry 0",
		`[{"token": "tttttttttttttttt", "sender": "a", "can_start_sessions": "yes"}]`:                  "entry 0",
		`[{"token": "tttttttttttttttt", "sender": "a", "max_open_sessions": -1}]`:                      "negative",
		`[{"token": "tttttttttttttttt", "sender": "a", "max_open_sessions": 1.5}]`:                     "entry 0",
		`[{"token": "tttttttttttttttt", "sender": "a", "allowed_modes": [""]}]`:                        "empty mode",
		`[{"token": "tttttttttttttttt", "sender": "a"}, {"token": "tttttttttttttttt", "sender": "b"}]`: "same token as entry 0",
	} {
		_, _, err := ParseTokens([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTokens(%s): %v, want %q", doc, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "tttttttttttttttt") {
			t.Errorf("ParseTokens(%s): error reveals the token: %v", doc, err)
		}
	}
}

const tokenList = `[{"token": "alice-token-0123456789", "sender": "agent://alice"},
	{"token": "bob-token-0123456789", "sender": "agent://bob", "is_observer": true}]`

func newTokens(t *testing.T, o TokensOptions) *Tokens {
	t.Helper()
	tk, err := NewTokens(o)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// checklist SEC-2: "authorization: Bearer <token>" and the reference
// runtime's x-macp-token header; unknown tokens are UNAUTHENTICATED (or
// left to the dev authenticator with DeferUnknown); no token is
// ErrNoCredentials.
func TestTokensAuthenticate(t *testing.T) {
	ctx := context.Background()
	tk := newTokens(t, TokensOptions{JSON: tokenList})
	for _, m := range []*Credentials{
		creds("authorization", "Bearer alice-token-0123456789"),
		creds("authorization", "bearer   alice-token-0123456789 "),
		creds("x-macp-token", "alice-token-0123456789"),
		creds("x-macp-token", " alice-token-0123456789 "),
		creds("authorization", "Bearer alice-token-0123456789", "x-macp-token", "bob-token-0123456789"),
	} {
		id, err := tk.Authenticate(ctx, m)
		if err != nil || id.Sender != "agent://alice" || id.Caps.IsObserver {
			t.Errorf("Authenticate(%v) = %+v, %v", m, id, err)
		}
	}
	if id, err := tk.Authenticate(ctx, creds("x-macp-token", "bob-token-0123456789")); err != nil || id.Sender != "agent://bob" || !id.Caps.IsObserver {
		t.Errorf("bob: %+v %v", id, err)
	}
	for _, m := range []*Credentials{nil, creds(), creds("authorization", "Basic eA=="), creds("x-macp-agent-id", "alice"), creds("x-macp-token", "  ")} {
		if _, err := tk.Authenticate(ctx, m); !errors.Is(err, ErrNoCredentials) {
			t.Errorf("Authenticate(%v): %v, want ErrNoCredentials", m, err)
		}
	}
	for _, m := range []*Credentials{
		creds("authorization", "Bearer alice"),
		creds("authorization", "Bearer alice-token-012345678"),   // a prefix
		creds("authorization", "Bearer alice-token-01234567890"), // an extension
		creds("x-macp-token", "agent://alice"),
		creds("authorization", "Bearer a.b.c"),
	} {
		_, err := tk.Authenticate(ctx, m)
		if coord.CodeOf(err) != coord.CodeUnauthenticated || errors.Is(err, ErrNoCredentials) {
			t.Errorf("Authenticate(%v): %v, want UNAUTHENTICATED", m, err)
		}
	}
	deferring := newTokens(t, TokensOptions{JSON: tokenList, DeferUnknown: true})
	if _, err := deferring.Authenticate(ctx, creds("authorization", "Bearer alice")); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("DeferUnknown: %v", err)
	}
	if id, err := deferring.Authenticate(ctx, creds("authorization", "Bearer alice-token-0123456789")); err != nil || id.Sender != "agent://alice" {
		t.Errorf("DeferUnknown, known token: %+v %v", id, err)
	}
}

// tokens.go lookup: every configured token hash is compared, with
// crypto/subtle, whichever token matches (first, last, none), so the cost
// does not reveal which token matched.
func TestTokensConstantTimePath(t *testing.T) {
	tk := newTokens(t, TokensOptions{JSON: `[
		{"token": "token-number-one-000", "sender": "one"},
		{"token": "token-number-two-000", "sender": "two"},
		{"token": "token-number-three-0", "sender": "three"},
		{"token": "token-number-four-00", "sender": "four"}]`})
	var calls, lens int
	ctCompare = func(a, b []byte) int {
		calls++
		if len(a) != 32 || len(b) != 32 {
			lens++
		}
		return subtle.ConstantTimeCompare(a, b)
	}
	defer func() { ctCompare = subtle.ConstantTimeCompare }()
	for tok, want := range map[string]string{
		"token-number-one-000": "one", "token-number-four-00": "four", "token-number-two-000": "two",
		"unknown": "", "token-number-one-00": "", strings.Repeat("x", 4096): "",
	} {
		calls = 0
		id, err := tk.Authenticate(context.Background(), creds("authorization", "Bearer "+tok))
		if id.Sender != want || (want == "") != (err != nil) {
			t.Errorf("%q: %+v %v", tok, id, err)
		}
		if calls != 4 {
			t.Errorf("%q: %d comparisons, want one per configured token (4)", tok, calls)
		}
	}
	if lens != 0 {
		t.Error("compared values of differing lengths: hash before comparing")
	}
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// writeFile replaces path's content and gives it a new modification time.
func writeFile(t *testing.T, path, content string, mod time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// MACP_AUTH_TOKENS_FILE is reloaded when it changes (checked at most every
// ReloadInterval): a new token works, a removed one stops working; a
// change that fails to parse keeps the tokens in force and is logged; so
// does a removed file.
func TestTokensFileReload(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tokens.json")
	base := time.Now().Add(-time.Hour)
	writeFile(t, path, `{"tokens": [{"token": "alice-token-0123456789", "sender": "alice"}]}`, base)
	var logs lockedBuf
	tk := newTokens(t, TokensOptions{File: path, ReloadInterval: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	clk := &clock{t: time.Now()}
	tk.now = clk.now
	tk.lastCheck.Store(clk.now().UnixNano())
	who := func(tok string) string {
		id, err := tk.Authenticate(ctx, creds("authorization", "Bearer "+tok))
		if err != nil {
			return err.Error()
		}
		return id.Sender
	}
	if got := who("alice-token-0123456789"); got != "alice" {
		t.Fatalf("alice: %s", got)
	}

	writeFile(t, path, `[{"token": "bob-token-0123456789", "sender": "bob"}]`, base.Add(time.Second))
	if got := who("bob-token-0123456789"); got == "bob" {
		t.Fatal("reloaded before the interval")
	}
	clk.add(5 * time.Second)
	if got := who("bob-token-0123456789"); got != "bob" {
		t.Fatalf("after reload, bob: %s", got)
	}
	if got := who("alice-token-0123456789"); !strings.Contains(got, "UNAUTHENTICATED") {
		t.Fatalf("after reload, removed alice: %s", got)
	}
	if !strings.Contains(logs.String(), "reloaded") {
		t.Errorf("reload not logged: %s", logs.String())
	}

	// An invalid change keeps bob, and is logged once.
	writeFile(t, path, `[{"token": "carol-token-0123456789"`, base.Add(2*time.Second))
	for range 3 {
		clk.add(5 * time.Second)
		if got := who("bob-token-0123456789"); got != "bob" {
			t.Fatalf("after a bad reload, bob: %s", got)
		}
	}
	if n := strings.Count(logs.String(), "keeping the tokens in force"); n != 1 {
		t.Errorf("bad file logged %d times:\n%s", n, logs.String())
	}
	// Fixed: picked up.
	writeFile(t, path, `[{"token": "carol-token-0123456789", "sender": "carol"}]`, base.Add(3*time.Second))
	clk.add(5 * time.Second)
	if got := who("carol-token-0123456789"); got != "carol" {
		t.Fatalf("after the fix, carol: %s", got)
	}
	// Removed: carol stays.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.add(5 * time.Second)
	if got := who("carol-token-0123456789"); got != "carol" {
		t.Fatalf("after removal, carol: %s", got)
	}
	// Same size, new modification time: still noticed.
	writeFile(t, path, `[{"token": "dave0-token-0123456789", "sender": "dave0"}]`, base.Add(4*time.Second))
	clk.add(5 * time.Second)
	if got := who("dave0-token-0123456789"); got != "dave0" {
		t.Fatalf("dave0: %s", got)
	}
	writeFile(t, path, `[{"token": "dave1-token-0123456789", "sender": "dave1"}]`, base.Add(5*time.Second))
	clk.add(5 * time.Second)
	if got := who("dave1-token-0123456789"); got != "dave1" {
		t.Fatalf("dave1: %s", got)
	}
}

// Reloading with the real clock, concurrently with authentications (run
// with -race).
func TestTokensFileReloadConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	writeFile(t, path, `[{"token": "alice-token-0123456789", "sender": "alice"}]`, time.Now().Add(-time.Minute))
	tk := newTokens(t, TokensOptions{File: path, ReloadInterval: time.Millisecond})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = tk.Authenticate(context.Background(), creds("authorization", "Bearer alice-token-0123456789"))
			}
		}()
	}
	writeFile(t, path, `[{"token": "bob-token-0123456789", "sender": "bob"}]`, time.Now())
	deadline := time.Now().Add(5 * time.Second)
	for {
		if id, err := tk.Authenticate(context.Background(), creds("authorization", "Bearer bob-token-0123456789")); err == nil && id.Sender == "bob" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("bob never loaded")
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

// A token configuration that cannot be loaded stops startup.
func TestNewTokensErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	writeFile(t, bad, `{"tokens": "no"}`, time.Now())
	for name, o := range map[string]TokensOptions{
		"nothing":      {},
		"both":         {JSON: tokenList, File: bad},
		"missing file": {File: filepath.Join(dir, "missing.json")},
		"bad file":     {File: bad},
		"bad json":     {JSON: `[{"token": "x"}]`},
	} {
		if _, err := NewTokens(o); err == nil {
			t.Errorf("%s: NewTokens succeeded", name)
		} else if !strings.Contains(err.Error(), "MACP_AUTH_TOKENS") {
			t.Errorf("%s: error does not name the setting: %v", name, err)
		}
	}
}
