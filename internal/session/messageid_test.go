package session_test

import (
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// Issue 26 item 7: message_id with a control character (NUL, newline, any
// C0, DEL) is refused INVALID_ENVELOPE at admission; stored history is
// not re-judged by it (CheckEnvelope, which replay uses, accepts it).
func TestNewEnvelopeMessageIDControlCharacters(t *testing.T) {
	lim := session.DefaultLimits()
	for _, id := range []string{"a\x00b", "a\nb", "\r", "tab\there", "del\x7f", "\x1b[31m"} {
		env := validSessionEnv()
		env.MessageId = id
		if err := session.CheckNewEnvelope(env, lim); err == nil || err.Code != coord.CodeInvalidEnvelope {
			t.Errorf("message_id %q: %v, want INVALID_ENVELOPE", id, err)
		}
		if err := session.CheckEnvelope(env, lim); err != nil {
			t.Errorf("message_id %q refused by the replay rules: %v", id, err)
		}
	}
	for _, id := range []string{"m-1", "ünïcødé", "a b", "550e8400-e29b-41d4-a716-446655440000"} {
		env := validSessionEnv()
		env.MessageId = id
		if err := session.CheckNewEnvelope(env, lim); err != nil {
			t.Errorf("message_id %q: %v", id, err)
		}
	}
}
