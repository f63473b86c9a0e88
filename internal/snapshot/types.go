package snapshot

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"

	"github.com/macpd/macpd/internal/coord"
)

// The payload's string fields are of four named types only. Each has a
// grammar (checked by Validate before any payload is canonicalized) that
// admits identifiers, protocol names, closed classes and hashes, and
// nothing that could carry prose: no whitespace, no control characters,
// nothing over 128 bytes. A raw value that does not fit ID's grammar is
// replaced by its hash (NewID), so an odd client-chosen id is still
// represented deterministically, never verbatim.

// ID is a client- or deployment-chosen identifier: a session, message or
// commitment id, a sender or participant, a version label, the session
// key's event source and server id.
type ID string

// Name is a protocol name: a mode id, a message type, a commitment
// action, the payload format.
type Name string

// Class is a value from a closed set (a state, a window kind, a privacy
// profile, how a session ended, a determinism class).
type Class string

// Hash is "sha256:" followed by 64 lowercase hex digits.
type Hash string

// maxToken is the longest ID or Name kept verbatim.
const maxToken = 128

// tokenOK reports whether s is 1..maxToken printable, non-space ASCII
// bytes (0x21..0x7e).
func tokenOK(s string) bool {
	if len(s) == 0 || len(s) > maxToken {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// HashBytes is the content address of b.
func HashBytes(b []byte) Hash {
	sum := sha256.Sum256(b)
	return Hash("sha256:" + hex.EncodeToString(sum[:]))
}

// NewID returns s as an ID when it fits the grammar, else the hash of its
// bytes (so an id with spaces or a long id is never kept verbatim).
func NewID(s string) ID {
	if tokenOK(s) {
		return ID(s)
	}
	return ID(HashBytes([]byte(s)))
}

// opaqueDomain separates Opaque digests from every other SHA-256 input.
const opaqueDomain = "macpd.snapshot.opaque-id.v1"

// Opaque is the identifier reports and payloads carry in place of a
// client-chosen one (a session, message or commitment id, a sender or
// participant, a configuration version, a commitment action): "sha256:"
// + hex(SHA-256(domain || u64be(len(eventSource)) || eventSource ||
// u64be(len(serverID)) || serverID || u64be(len(raw)) || raw)). The
// lengths are fixed-width big-endian, so the bytes hashed, and the id,
// are the same on every architecture, run and server with equal
// settings (docs/snapshots.md "Opaque identifiers").
func Opaque(eventSource, serverID, raw string) ID {
	h := sha256.New()
	h.Write([]byte(opaqueDomain))
	var n [8]byte
	for _, part := range []string{eventSource, serverID, raw} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return ID("sha256:" + hex.EncodeToString(h.Sum(nil)))
}

// NewName returns s as a Name when it fits the grammar, else the hash of
// its bytes.
func NewName(s string) Name { return Name(NewID(s)) }

// IDs converts a list with NewID, keeping its order.
func IDs(ss []string) []ID {
	out := make([]ID, len(ss))
	for i, s := range ss {
		out[i] = NewID(s)
	}
	return out
}

// ValidHash reports whether h is "sha256:" + 64 lowercase hex digits.
func ValidHash(h string) bool {
	hexPart, ok := strings.CutPrefix(h, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		c := hexPart[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Classes: the closed sets.
var classes = map[Class]struct{}{}

func class(s string) Class {
	c := Class(s)
	classes[c] = struct{}{}
	return c
}

// States (RFC-MACP-0001 §7.2). SUSPENDED and CANCELLED occur only in
// sessions that were suspended, or cancelled under profile latest.
var (
	StateOpen      = class("OPEN")
	StateResolved  = class("RESOLVED")
	StateExpired   = class("EXPIRED")
	StateSuspended = class("SUSPENDED")
	StateCancelled = class("CANCELLED")
)

// Window kinds (ADR-029 §2).
var (
	WindowSession           = class("session")
	WindowCrossSessionDecay = class("cross_session_decay")
)

// Privacy profiles: Default keeps a SHA-256 of every accepted payload;
// Strict keeps none (a vote's hash can be guessed by hashing the few
// possible votes).
var (
	ProfileDefault = class("default")
	ProfileStrict  = class("strict")
)

// How a terminal session ended.
var (
	EndedByCommitment = class("commitment")
	EndedByCancel     = class("cancel")
	EndedByTTL        = class("ttl")
)

// ProtocolLatest is the payload's protocol_profile of a session bound to
// profile 2026-09 ("latest"); a 2026-04 session has none.
var ProtocolLatest = class(coord.ProfileLatest)

// Determinism classes (RFC-MACP-0003 §5) and "unknown" for a mode this
// build does not have.
var (
	_ = class("structural-only")
	_ = class("semantic-deterministic")
	_ = class("context-frozen")
	_ = class("non-deterministic")
	_ = class("unknown")
)

// ParseProfile maps a profile name to its Class.
func ParseProfile(s string) (Class, error) {
	switch Class(s) {
	case ProfileDefault, "":
		return ProfileDefault, nil
	case ProfileStrict:
		return ProfileStrict, nil
	}
	return "", fmt.Errorf("snapshot: unknown privacy profile %q (want default or strict)", s)
}

var (
	typeID    = reflect.TypeFor[ID]()
	typeName  = reflect.TypeFor[Name]()
	typeClass = reflect.TypeFor[Class]()
	typeHash  = reflect.TypeFor[Hash]()
)

// Validate walks v (a Payload or any value built from the snapshot types)
// and checks every string against its type's grammar: ID and Name must
// fit the token grammar or be a Hash, Class must be one of the closed
// sets, Hash must be a sha256 content address. Integers must be below
// 2^53 (RFC 8785 numbers are IEEE doubles). Any other string, any byte
// slice, map or interface is an error: the payload types cannot carry
// them. Canonical calls it on every payload.
func Validate(v any) error {
	return validate(reflect.ValueOf(v), "payload")
}

func validate(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return validate(v.Elem(), path)
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := v.Field(i)
			if f.Kind() == reflect.String && f.Len() == 0 && strings.Contains(t.Field(i).Tag.Get("json"), ",omitempty") {
				continue // an absent optional field
			}
			if err := validate(f, path+"."+t.Field(i).Name); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return fmt.Errorf("snapshot: %s: byte slices are not allowed", path)
		}
		for i := 0; i < v.Len(); i++ {
			if err := validate(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Bool:
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.Uint() >= 1<<53 {
			return fmt.Errorf("snapshot: %s: %d is not below 2^53", path, v.Uint())
		}
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n := v.Int(); n >= 1<<53 || n <= -(1<<53) {
			return fmt.Errorf("snapshot: %s: %d is not within ±2^53", path, n)
		}
		return nil
	case reflect.String:
		s := v.String()
		switch v.Type() {
		case typeID, typeName:
			if tokenOK(s) || ValidHash(s) {
				return nil
			}
			return fmt.Errorf("snapshot: %s: not an identifier", path)
		case typeClass:
			if _, ok := classes[Class(s)]; ok {
				return nil
			}
			return fmt.Errorf("snapshot: %s: %q is not a known class", path, s)
		case typeHash:
			if ValidHash(s) {
				return nil
			}
			return fmt.Errorf("snapshot: %s: not a sha256 content address", path)
		}
		return fmt.Errorf("snapshot: %s: free-text string of type %s", path, v.Type())
	}
	return fmt.Errorf("snapshot: %s: %s values are not allowed", path, v.Kind())
}
