package config

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/limits"
)

// docs/security.md "Limits": the documented defaults; the two rates are
// the reference runtime's (60 SessionStarts and 600 messages per minute).
func TestDefaultLimits(t *testing.T) {
	l := Default().Limits
	want := LimitsConfig{
		SessionStartsPerMinute: 60, MessagesPerMinute: 600, StreamBufferBytes: 1 << 20, StreamBufferBudgetBytes: 256 << 20, StreamStallTimeout: 30 * time.Second, MaxExtModes: 64, MaxPolicies: 256, MaxDescriptorBytes: 128 << 10,
		Transport: limits.Transport{MaxConnections: 4096, MaxConcurrentStreams: 100, MaxStreamsPerIdentity: 256, MaxStreamsPerSession: 1024, UnaryTimeout: 30 * time.Second, HandshakeTimeout: 10 * time.Second, MaxConnectionIdle: 5 * time.Minute, KeepaliveTime: time.Minute, KeepaliveTimeout: 20 * time.Second, KeepaliveMinTime: 10 * time.Second, MaxConnectionsPerAddr: 128, MaxConnectionsPerPrefix64: 256, FirstCallTimeout: 15 * time.Second},
	}
	if l != want {
		t.Fatalf("defaults\n got %+v\nwant %+v", l, want)
	}
}

// Every limit is an environment variable and a flag; flags win; 0 is
// accepted (disables the limit).
func TestLimitsEnvAndFlags(t *testing.T) {
	c := Default()
	err := c.FromEnv(env(map[string]string{
		"MACP_SESSION_START_LIMIT_PER_MINUTE": "0",
		"MACP_MESSAGE_LIMIT_PER_MINUTE":       "7",
		"MACP_MAX_CONNECTIONS":                "8",
		"MACP_MAX_CONCURRENT_STREAMS":         "9",
		"MACP_MAX_STREAMS_PER_IDENTITY":       "10",
		"MACP_MAX_STREAMS_PER_SESSION":        "11",
		"MACP_UNARY_TIMEOUT_MS":               "1200",
		"MACP_HANDSHAKE_TIMEOUT_MS":           "1300",
		"MACP_MAX_CONNECTION_IDLE_MS":         "1400",
		"MACP_KEEPALIVE_TIME_MS":              "1500",
		"MACP_KEEPALIVE_TIMEOUT_MS":           "1600",
		"MACP_KEEPALIVE_MIN_TIME_MS":          "0",
		"MACP_STREAM_BUFFER_BYTES":            "1000",
		"MACP_STREAM_BUFFER_BUDGET_BYTES":     "2000",
		"MACP_STREAM_STALL_TIMEOUT_MS":        "0",
		"MACP_MAX_CONNECTIONS_PER_ADDR":       "0",
		"MACP_MAX_CONNECTIONS_PER_PREFIX64":   "0",
		"MACP_STREAM_BUFFER_IDENTITY_BYTES":   "300",
		"MACP_STREAM_BUFFER_SESSION_BYTES":    "600",
		"MACP_FIRST_CALL_TIMEOUT_MS":          "0",
		"MACP_MAX_EXT_MODES":                  "3",
		"MACP_MAX_POLICIES":                   "4",
		"MACP_MAX_DESCRIPTOR_BYTES":           "5",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := LimitsConfig{
		SessionStartsPerMinute: 0, MessagesPerMinute: 7, StreamBufferBytes: 1000, StreamBufferBudgetBytes: 2000, StreamBufferIdentityBytes: 300, StreamBufferSessionBytes: 600, StreamStallTimeout: 0, MaxExtModes: 3, MaxPolicies: 4, MaxDescriptorBytes: 5,
		Transport: limits.Transport{MaxConnections: 8, MaxConcurrentStreams: 9, MaxStreamsPerIdentity: 10, MaxStreamsPerSession: 11, UnaryTimeout: 1200 * time.Millisecond, HandshakeTimeout: 1300 * time.Millisecond, MaxConnectionIdle: 1400 * time.Millisecond, KeepaliveTime: 1500 * time.Millisecond, KeepaliveTimeout: 1600 * time.Millisecond, KeepaliveMinTime: 0, MaxConnectionsPerAddr: 0, FirstCallTimeout: 0},
	}
	if c.Limits != want {
		t.Fatalf("FromEnv\n got %+v\nwant %+v", c.Limits, want)
	}
	c.AllowInsecure = true
	if err := c.Validate(); err != nil {
		t.Fatalf("zeros and small values must validate: %v", err)
	}
	fs := flag.NewFlagSet("macpd", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--session-start-limit", "1", "--message-limit", "2", "--max-connections", "3",
		"--max-concurrent-streams", "4", "--max-streams-per-identity", "5", "--max-streams-per-session", "6",
		"--unary-timeout", "1s", "--handshake-timeout", "2s", "--max-connection-idle", "3s", "--keepalive-time", "4s",
		"--keepalive-timeout", "5s", "--keepalive-min-time", "6s",
		"--stream-buffer-bytes", "7", "--stream-buffer-budget", "8", "--stream-stall-timeout", "9s",
		"--stream-buffer-identity-bytes", "15", "--stream-buffer-session-bytes", "16", "--max-connections-per-prefix64", "17",
		"--max-connections-per-addr", "10", "--first-call-timeout", "11s", "--max-ext-modes", "12", "--max-policies", "13",
		"--max-descriptor-bytes", "14"}); err != nil {
		t.Fatal(err)
	}
	want = LimitsConfig{
		SessionStartsPerMinute: 1, MessagesPerMinute: 2, StreamBufferBytes: 7, StreamBufferBudgetBytes: 8, StreamBufferIdentityBytes: 15, StreamBufferSessionBytes: 16, StreamStallTimeout: 9 * time.Second, MaxExtModes: 12, MaxPolicies: 13, MaxDescriptorBytes: 14,
		Transport: limits.Transport{MaxConnections: 3, MaxConcurrentStreams: 4, MaxStreamsPerIdentity: 5, MaxStreamsPerSession: 6, UnaryTimeout: time.Second, HandshakeTimeout: 2 * time.Second, MaxConnectionIdle: 3 * time.Second, KeepaliveTime: 4 * time.Second, KeepaliveTimeout: 5 * time.Second, KeepaliveMinTime: 6 * time.Second, MaxConnectionsPerAddr: 10, MaxConnectionsPerPrefix64: 17, FirstCallTimeout: 11 * time.Second},
	}
	if c.Limits != want {
		t.Fatalf("flags\n got %+v\nwant %+v", c.Limits, want)
	}
}

func TestLimitsBadValues(t *testing.T) {
	c := Default()
	err := c.FromEnv(env(map[string]string{
		"MACP_MESSAGE_LIMIT_PER_MINUTE": "lots",
		"MACP_UNARY_TIMEOUT_MS":         "30s",
	}))
	for _, s := range []string{"MACP_MESSAGE_LIMIT_PER_MINUTE", "MACP_UNARY_TIMEOUT_MS"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("error does not name %s: %v", s, err)
		}
	}
	if c.Limits != DefaultLimits() {
		t.Fatalf("bad values changed the limits: %+v", c.Limits)
	}
	c = Default()
	c.AllowInsecure = true
	c.Limits.SessionStartsPerMinute = -1
	c.Limits.MaxConcurrentStreams = -2
	c.Limits.MaxConnectionIdle = -time.Second
	err = c.Validate()
	for _, s := range []string{"MACP_SESSION_START_LIMIT_PER_MINUTE", "MACP_MAX_CONCURRENT_STREAMS", "MACP_MAX_CONNECTION_IDLE_MS"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("validation does not name %s: %v", s, err)
		}
	}
}
