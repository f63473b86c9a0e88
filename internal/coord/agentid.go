package coord

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxAgentIDBytes bounds an agent id (a sender or a declared participant).
const MaxAgentIDBytes = 256

// ValidAgentID is the rule for agent ids, the same for authenticated
// senders and for the participants a SessionStart declares (RFC-MACP-0004
// §3: the sender is an authenticated identity, so a participant that no
// identity can ever be is refused): 1 to MaxAgentIDBytes bytes of valid
// UTF-8, printable, without surrounding space, and not starting with '_'
// (reserved for the runtime, e.g. RuntimeSender).
func ValidAgentID(s string) bool {
	if s == "" || len(s) > MaxAgentIDBytes || s[0] == '_' || strings.TrimSpace(s) != s || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
