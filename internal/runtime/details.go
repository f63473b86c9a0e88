package runtime

import "encoding/json"

// reasonsJSON encodes MACPError.details for POLICY_DENIED and similar as
// {"reasons": [...]} (the reference runtime's shape).
func reasonsJSON(reasons []string) []byte {
	b, _ := json.Marshal(struct {
		Reasons []string `json:"reasons"`
	}{reasons})
	return b
}
