package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/macpd/macpd/internal/coord"
)

// DefaultReloadInterval is how often a token file is checked for changes.
const DefaultReloadInterval = 5 * time.Second

// StaticToken is one configured opaque bearer token and the identity it
// authenticates.
type StaticToken struct {
	Token    string
	Identity coord.Identity
}

// rawToken is one entry of the reference runtime's token format.
type rawToken struct {
	Token                 *string  `json:"token"`
	Sender                *string  `json:"sender"`
	AllowedModes          []string `json:"allowed_modes"`
	CanStartSessions      *bool    `json:"can_start_sessions"`
	MaxOpenSessions       *int     `json:"max_open_sessions"`
	CanManageModeRegistry bool     `json:"can_manage_mode_registry"`
	IsObserver            bool     `json:"is_observer"`
}

var knownTokenFields = []string{"token", "sender", "allowed_modes", "can_start_sessions", "max_open_sessions",
	"can_manage_mode_registry", "is_observer"}

// minTokenLen is the length below which a configured token draws a warning:
// short tokens can be guessed.
const minTokenLen = 16

// ParseTokens parses a static token list in either of the reference
// runtime's forms, a JSON array of entries or {"tokens": [entries]}:
//
//	[{"token": "s3cr3t", "sender": "agent://a", "allowed_modes": ["macp.mode.decision.v1"],
//	  "can_start_sessions": true, "max_open_sessions": 10,
//	  "can_manage_mode_registry": false, "is_observer": false}]
//
// token and sender are required; sender must be a valid sender id
// (ValidSender); tokens must be unique. allowed_modes empty or absent means
// every mode; can_start_sessions defaults to true; max_open_sessions absent
// means the runtime default, and 0 means the identity may hold no open
// session at all (it cannot start sessions, as in the reference runtime).
// Unknown fields are ignored (as the reference runtime does) but reported
// in warnings, together with tokens shorter than 16 characters.
func ParseTokens(data []byte) (tokens []StaticToken, warnings []string, err error) {
	data = bytes.TrimSpace(data)
	var entries []json.RawMessage
	switch {
	case len(data) == 0:
		return nil, nil, errors.New("empty token list (want a JSON array or {\"tokens\": [...]})")
	case data[0] == '[':
		if err := json.Unmarshal(data, &entries); err != nil {
			return nil, nil, fmt.Errorf("token list: %v", err)
		}
	case data[0] == '{':
		var wrapped struct {
			Tokens *[]json.RawMessage `json:"tokens"`
		}
		if err := json.Unmarshal(data, &wrapped); err != nil {
			return nil, nil, fmt.Errorf("token list: %v", err)
		}
		if wrapped.Tokens == nil {
			return nil, nil, errors.New(`token list: object has no "tokens" array`)
		}
		entries = *wrapped.Tokens
	default:
		return nil, nil, errors.New("token list: want a JSON array or {\"tokens\": [...]}")
	}
	seen := make(map[[32]byte]int, len(entries))
	for i, e := range entries {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(e, &fields); err != nil {
			return nil, nil, fmt.Errorf("token entry %d: not a JSON object", i)
		}
		for k := range fields {
			if !slices.Contains(knownTokenFields, k) {
				warnings = append(warnings, fmt.Sprintf("token entry %d: unknown field %q ignored", i, k))
			}
		}
		var r rawToken
		if err := json.Unmarshal(e, &r); err != nil {
			return nil, nil, fmt.Errorf("token entry %d: %v", i, err)
		}
		switch {
		case r.Token == nil || *r.Token == "":
			return nil, nil, fmt.Errorf("token entry %d: \"token\" is missing or empty", i)
		case strings.TrimSpace(*r.Token) != *r.Token:
			return nil, nil, fmt.Errorf("token entry %d: token has leading or trailing white space", i)
		case r.Sender == nil:
			return nil, nil, fmt.Errorf("token entry %d: \"sender\" is missing", i)
		case !ValidSender(*r.Sender):
			return nil, nil, fmt.Errorf("token entry %d: sender %q is not a valid sender id", i, *r.Sender)
		case r.MaxOpenSessions != nil && *r.MaxOpenSessions < 0:
			return nil, nil, fmt.Errorf("token entry %d (sender %s): max_open_sessions %d is negative", i, *r.Sender, *r.MaxOpenSessions)
		}
		h := sha256.Sum256([]byte(*r.Token))
		if j, dup := seen[h]; dup {
			// The token itself is a secret: name the entries, not the token.
			return nil, nil, fmt.Errorf("token entry %d (sender %s): same token as entry %d", i, *r.Sender, j)
		}
		seen[h] = i
		if len(*r.Token) < minTokenLen {
			warnings = append(warnings, fmt.Sprintf("token entry %d (sender %s): token is shorter than %d characters and may be guessed",
				i, *r.Sender, minTokenLen))
		}
		for _, m := range r.AllowedModes {
			if m == "" {
				return nil, nil, fmt.Errorf("token entry %d (sender %s): empty mode in allowed_modes", i, *r.Sender)
			}
		}
		tokens = append(tokens, StaticToken{Token: *r.Token, Identity: coord.Identity{
			Sender: *r.Sender,
			Caps:   capsFromScopes(r.AllowedModes, len(r.AllowedModes) == 0, r.CanStartSessions, r.MaxOpenSessions, r.CanManageModeRegistry, r.IsObserver),
		}})
	}
	return tokens, warnings, nil
}

// capsFromScopes maps the reference runtime's capability fields onto
// coord.Capabilities. allModes makes AllowedModes nil (every mode).
// canStart defaults to true; maxOpen nil is the runtime default and 0 means
// no open session may be held, so no session can be started.
func capsFromScopes(modes []string, allModes bool, canStart *bool, maxOpen *int, canManage, observer bool) coord.Capabilities {
	c := coord.Capabilities{CanManageModeRegistry: canManage, IsObserver: observer}
	if !allModes {
		c.AllowedModes = append([]string{}, modes...)
	}
	if canStart != nil && !*canStart {
		c.CannotStartSessions = true
	}
	if maxOpen != nil {
		if *maxOpen == 0 {
			c.CannotStartSessions = true
		} else {
			c.MaxOpenSessions = *maxOpen
		}
	}
	return c
}

// tokenSet is an immutable set of token hashes and their identities.
type tokenSet struct {
	hashes [][sha256.Size]byte
	ids    []coord.Identity
}

func newTokenSet(tokens []StaticToken) *tokenSet {
	s := &tokenSet{hashes: make([][sha256.Size]byte, len(tokens)), ids: make([]coord.Identity, len(tokens))}
	for i, t := range tokens {
		s.hashes[i] = sha256.Sum256([]byte(t.Token))
		s.ids[i] = t.Identity
	}
	return s
}

// ctCompare is subtle.ConstantTimeCompare; a variable so tests can observe
// that every lookup compares against every configured token.
var ctCompare = subtle.ConstantTimeCompare

// lookup finds the identity of token in constant time with respect to the
// configured tokens: the presented token is hashed to a fixed length and
// compared with every configured hash, without an early exit, and the
// matching index is selected without a branch. The work therefore depends
// only on the number of configured tokens, not on which (if any) matched or
// on how many leading bytes agree.
func (s *tokenSet) lookup(token string) (coord.Identity, bool) {
	h := sha256.Sum256([]byte(token))
	found, idx := 0, 0
	for i := range s.hashes {
		eq := ctCompare(h[:], s.hashes[i][:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
		found |= eq
	}
	if found == 0 {
		return coord.Identity{}, false
	}
	return s.ids[idx], true
}

// TokensOptions configure NewTokens. Exactly one of JSON and File is set.
type TokensOptions struct {
	// JSON is an inline token list (MACP_AUTH_TOKENS_JSON).
	JSON string
	// File is a token list file (MACP_AUTH_TOKENS_FILE). It is checked for
	// changes (modification time and size) at most every ReloadInterval,
	// on the next authentication after the interval; a change is loaded
	// before that authentication is answered. A file that fails to load
	// keeps the previous tokens in force and is logged.
	File string
	// ReloadInterval defaults to DefaultReloadInterval; negative disables
	// reloading.
	ReloadInterval time.Duration
	// DeferUnknown makes an unknown token ErrNoCredentials instead of
	// UNAUTHENTICATED, so a later authenticator in the Chain (the dev
	// authenticator) may take it. Set it only when dev identities are on.
	DeferUnknown bool
	Logger       *slog.Logger
}

// Tokens authenticates opaque bearer tokens against a static list (the
// reference runtime's MACP_AUTH_TOKENS_JSON / MACP_AUTH_TOKENS_FILE). The
// token is read from "authorization: Bearer <token>" or, without one, the
// "x-macp-token" header.
type Tokens struct {
	set          atomic.Pointer[tokenSet]
	file         string
	interval     time.Duration
	deferUnknown bool
	log          *slog.Logger
	now          func() time.Time

	lastCheck atomic.Int64 // unix nanoseconds of the last file check
	mu        sync.Mutex   // held while checking the file
	stamp     fileStamp    // of the file as last loaded (or tried); under mu
	statErr   bool         // the last check could not stat the file; under mu
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func statStamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// NewTokens loads the token list; a list that cannot be read or parsed is
// an error (startup stops).
func NewTokens(o TokensOptions) (*Tokens, error) {
	t := &Tokens{file: o.File, interval: o.ReloadInterval, deferUnknown: o.DeferUnknown, log: o.Logger, now: time.Now}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if t.interval == 0 {
		t.interval = DefaultReloadInterval
	}
	var data []byte
	var source string
	switch {
	case o.JSON != "" && o.File != "":
		return nil, errors.New("MACP_AUTH_TOKENS_JSON and MACP_AUTH_TOKENS_FILE are both set: use one")
	case o.JSON != "":
		data, source = []byte(o.JSON), "MACP_AUTH_TOKENS_JSON"
	case o.File != "":
		st, err := statStamp(o.File)
		if err != nil {
			return nil, fmt.Errorf("MACP_AUTH_TOKENS_FILE: %w", err)
		}
		if data, err = os.ReadFile(o.File); err != nil {
			return nil, fmt.Errorf("MACP_AUTH_TOKENS_FILE: %w", err)
		}
		t.stamp, source = st, "MACP_AUTH_TOKENS_FILE "+o.File
	default:
		return nil, errors.New("no static tokens configured: set MACP_AUTH_TOKENS_JSON or MACP_AUTH_TOKENS_FILE")
	}
	tokens, warnings, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	for _, w := range warnings {
		t.log.Warn("static tokens: "+w, "source", source)
	}
	if len(tokens) == 0 {
		t.log.Warn("static tokens: the token list is empty; every token is refused", "source", source)
	}
	t.set.Store(newTokenSet(tokens))
	t.lastCheck.Store(t.now().UnixNano())
	t.log.Info("static bearer tokens loaded", "source", source, "count", len(tokens))
	return t, nil
}

// tokenFrom returns the bearer token, or else the x-macp-token header.
func tokenFrom(c *Credentials) string {
	if tok := c.BearerToken(); tok != "" || c == nil {
		return tok
	}
	return first(c.Token)
}

// Authenticate implements Authenticator.
func (t *Tokens) Authenticate(_ context.Context, c *Credentials) (coord.Identity, error) {
	tok := tokenFrom(c)
	if tok == "" {
		return coord.Identity{}, ErrNoCredentials
	}
	t.maybeReload()
	if id, ok := t.set.Load().lookup(tok); ok {
		return id, nil
	}
	if t.deferUnknown {
		return coord.Identity{}, ErrNoCredentials
	}
	return coord.Identity{}, coord.Errorf(coord.CodeUnauthenticated, "unknown bearer token")
}

// maybeReload checks the token file when the reload interval has passed
// since the last check. One caller checks while others carry on with the
// tokens in force.
func (t *Tokens) maybeReload() {
	if t.file == "" || t.interval < 0 {
		return
	}
	now := t.now().UnixNano()
	if now-t.lastCheck.Load() < int64(t.interval) || !t.mu.TryLock() {
		return
	}
	defer t.mu.Unlock()
	if now-t.lastCheck.Load() < int64(t.interval) {
		return
	}
	t.lastCheck.Store(now)
	t.reloadLocked()
}

// reloadLocked loads the file if its stamp changed. Failures keep the
// tokens in force; each failing version of the file is logged once.
func (t *Tokens) reloadLocked() {
	st, err := statStamp(t.file)
	if err != nil {
		if !t.statErr {
			t.log.Error("static tokens: cannot read the token file; keeping the tokens in force", "file", t.file, "err", err)
			t.statErr = true
		}
		return
	}
	t.statErr = false
	if st.mod.Equal(t.stamp.mod) && st.size == t.stamp.size {
		return
	}
	t.stamp = st
	data, err := os.ReadFile(t.file)
	if err != nil {
		t.log.Error("static tokens: cannot read the token file; keeping the tokens in force", "file", t.file, "err", err)
		return
	}
	tokens, warnings, err := ParseTokens(data)
	if err != nil {
		t.log.Error("static tokens: the changed token file is invalid; keeping the tokens in force", "file", t.file, "err", err)
		return
	}
	for _, w := range warnings {
		t.log.Warn("static tokens: "+w, "file", t.file)
	}
	t.set.Store(newTokenSet(tokens))
	t.log.Info("static bearer tokens reloaded", "file", t.file, "count", len(tokens))
}
