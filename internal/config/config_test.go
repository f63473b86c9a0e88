package config

import (
	"errors"
	"flag"
	"strconv"
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) Env {
	return func(k string) (string, bool) {
		v, ok := kv[k]
		return v, ok
	}
}

// config/doc.go: the documented defaults. MACP_MAX_PAYLOAD_BYTES 1 MiB
// (checklist ADM-3 [RT] 1,048,576), max ttl 24 h (START-5), 1000
// participants (START-6), start skew 5 min; neither TLS nor insecure, so
// the defaults alone do not validate (SEC-1).
func TestDefault(t *testing.T) {
	c := Default()
	want := Config{
		BindAddr:        "127.0.0.1:50051",
		DataDir:         ".macp-data",
		MemoryOnly:      false,
		MaxPayloadBytes: 1048576,
		MaxTTL:          86400000 * time.Millisecond,
		Profile:         "2026-04",
		MaxSuspend:      7 * 24 * time.Hour,
		MaxParticipants: 1000,
		MaxOpenSessions: 100,
		StartSkew:       5 * time.Minute,
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownGrace:   10 * time.Second,
		StreamHeartbeat: 15 * time.Second,
		EvictAfter:      5 * time.Minute,
		GCPercent:       200,
		GCMinHeap:       64 << 20,
		Limits:          DefaultLimits(),
		Snapshots:       DefaultSnapshots(),
		HTTP:            DefaultHTTP(),
		NATS:            DefaultNATS(),
	}
	if c != want {
		t.Fatalf("Default()\n got %+v\nwant %+v", c, want)
	}
	if c.AllowInsecure || c.TLSCertPath != "" || c.TLSKeyPath != "" {
		t.Fatalf("security or quota on by default: %+v", c)
	}
	if c.AdminAddr != "" || c.AdminPprof {
		t.Fatalf("admin endpoint or profiler on by default: %+v", c)
	}
	c.AllowInsecure = true
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults + insecure: %v", err)
	}
}

// Every MACP_* variable is applied (config/doc.go: environment overrides
// defaults).
func TestFromEnvEveryVariable(t *testing.T) {
	c := Default()
	err := c.FromEnv(env(map[string]string{
		"MACP_BIND_ADDR":           "0.0.0.0:7000",
		"MACP_DATA_DIR":            "/var/lib/macp",
		"MACP_MEMORY_ONLY":         "false",
		"MACP_ALLOW_INSECURE":      "1",
		"MACP_TLS_CERT_PATH":       "/etc/macp/cert.pem",
		"MACP_TLS_KEY_PATH":        "/etc/macp/key.pem",
		"MACP_MAX_PAYLOAD_BYTES":   "2048",
		"MACP_MAX_TTL_MS":          "60000",
		"MACP_PROFILE":             "latest",
		"MACP_MAX_SUSPEND_MS":      "3600000",
		"MACP_MAX_PARTICIPANTS":    "7",
		"MACP_MAX_OPEN_SESSIONS":   "3",
		"MACP_START_SKEW_MS":       "0",
		"MACP_LOG_LEVEL":           "debug",
		"MACP_LOG_FORMAT":          "json",
		"MACP_SHUTDOWN_GRACE_MS":   "2500",
		"MACP_STREAM_HEARTBEAT_MS": "0",
		"MACP_ADMIN_ADDR":          "127.0.0.1:9090",
		"MACP_ADMIN_PPROF":         "1",
		"MACP_GC_PERCENT":          "150",
		"MACP_MEMORY_LIMIT_BYTES":  "1073741824",
		"MACP_GC_MIN_HEAP_BYTES":   "33554432",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		BindAddr: "0.0.0.0:7000", DataDir: "/var/lib/macp", MemoryOnly: false, AllowInsecure: true,
		TLSCertPath: "/etc/macp/cert.pem", TLSKeyPath: "/etc/macp/key.pem",
		MaxPayloadBytes: 2048, MaxTTL: time.Minute, MaxParticipants: 7, MaxOpenSessions: 3, Profile: "latest", MaxSuspend: time.Hour,
		StartSkew: 0, LogLevel: "debug", LogFormat: "json", ShutdownGrace: 2500 * time.Millisecond,
		StreamHeartbeat: 0, EvictAfter: 5 * time.Minute, Limits: DefaultLimits(), Snapshots: DefaultSnapshots(), HTTP: DefaultHTTP(), NATS: DefaultNATS(),
		AdminAddr: "127.0.0.1:9090", AdminPprof: true, GCPercent: 150, GCMinHeap: 32 << 20, MemoryLimit: 1 << 30,
	}
	if c != want {
		t.Fatalf("FromEnv\n got %+v\nwant %+v", c, want)
	}
}

// Unset and empty variables keep the current value.
func TestFromEnvUnsetOrEmptyKeeps(t *testing.T) {
	c := Default()
	if err := c.FromEnv(env(nil)); err != nil || c != Default() {
		t.Fatalf("no variables: %+v %v", c, err)
	}
	empty := map[string]string{}
	for _, k := range []string{"MACP_BIND_ADDR", "MACP_MEMORY_ONLY", "MACP_MAX_PAYLOAD_BYTES", "MACP_MAX_TTL_MS", "MACP_LOG_LEVEL"} {
		empty[k] = ""
	}
	if err := c.FromEnv(env(empty)); err != nil || c != Default() {
		t.Fatalf("empty variables: %+v %v", c, err)
	}
}

func TestFromEnvBooleans(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "true": true, "TRUE": true, "yes": true, "on": true, " true ": true,
		"0": false, "false": false, "False": false, "no": false, "off": false} {
		c := Default()
		c.AllowInsecure = !want
		if err := c.FromEnv(env(map[string]string{"MACP_ALLOW_INSECURE": v})); err != nil || c.AllowInsecure != want {
			t.Errorf("MACP_ALLOW_INSECURE=%q: %v %v", v, c.AllowInsecure, err)
		}
	}
}

// Bad values are reported together, each naming its variable and value,
// and leave the field unchanged.
func TestFromEnvBadValues(t *testing.T) {
	bad := map[string]string{
		"MACP_MEMORY_ONLY":        "maybe",
		"MACP_ALLOW_INSECURE":     "y",
		"MACP_MAX_PAYLOAD_BYTES":  "1MiB",
		"MACP_MAX_TTL_MS":         "24h",
		"MACP_MAX_PARTICIPANTS":   "ten",
		"MACP_MAX_OPEN_SESSIONS":  "1.5",
		"MACP_START_SKEW_MS":      "5m",
		"MACP_SHUTDOWN_GRACE_MS":  "-",
		"MACP_ADMIN_PPROF":        "sometimes",
		"MACP_GC_MIN_HEAP_BYTES":  "64MiB",
		"MACP_MEMORY_LIMIT_BYTES": "1e9",
	}
	c := Default()
	err := c.FromEnv(env(bad))
	if err == nil {
		t.Fatal("no error")
	}
	for k, v := range bad {
		if !strings.Contains(err.Error(), k+": ") || !strings.Contains(err.Error(), `"`+v+`"`) {
			t.Errorf("error does not name %s=%q:\n%v", k, v, err)
		}
	}
	if c != Default() {
		t.Errorf("bad values changed the config: %+v", c)
	}
}

// A millisecond count that does not fit a time.Duration is an error, not a
// silently wrapped duration (9.3e15 ms used to become ~789163h, the maximum
// int64 ms became -1ms).
func TestFromEnvMillisOutOfRange(t *testing.T) {
	for _, v := range []string{"9300000000000000", "9223372036854775807", "-9300000000000000", "99999999999999999999"} {
		for _, k := range []string{"MACP_MAX_TTL_MS", "MACP_START_SKEW_MS", "MACP_SHUTDOWN_GRACE_MS"} {
			c := Default()
			err := c.FromEnv(env(map[string]string{k: v}))
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%s=%s: err %v, config %+v", k, v, err, c)
			}
			if c != Default() {
				t.Errorf("%s=%s changed the config: %+v", k, v, c)
			}
		}
	}
	c := Default()
	if err := c.FromEnv(env(map[string]string{"MACP_MAX_TTL_MS": "9223372036854"})); err != nil || c.MaxTTL != 9223372036854*time.Millisecond {
		t.Errorf("largest representable: %v %v", c.MaxTTL, err)
	}
}

// config/doc.go: flags override the environment, which overrides defaults;
// flags not given keep the environment's values.
func TestFlagsOverrideEnv(t *testing.T) {
	c := Default()
	if err := c.FromEnv(env(map[string]string{
		"MACP_BIND_ADDR": "0.0.0.0:7000", "MACP_ALLOW_INSECURE": "1", "MACP_MAX_TTL_MS": "60000",
		"MACP_LOG_LEVEL": "debug", "MACP_MAX_PARTICIPANTS": "9", "MACP_ADMIN_ADDR": "127.0.0.1:9090",
	})); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("macpd", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--addr", "127.0.0.1:7001", "--insecure=false", "--max-ttl", "2h",
		"--tls-cert", "c.pem", "--tls-key", "k.pem", "--max-payload-bytes", "100", "--max-open-sessions", "4",
		"--start-skew", "0s", "--log-format", "json", "--shutdown-grace", "1s", "--memory-only=true", "--data-dir", "d",
		"--admin-addr", "10.0.0.5:9100", "--admin-pprof", "--gc-percent", "300", "--memory-limit", "2048", "--gc-min-heap", "0"}); err != nil {
		t.Fatal(err)
	}
	want := Config{
		BindAddr: "127.0.0.1:7001", DataDir: "d", MemoryOnly: true, AllowInsecure: false,
		TLSCertPath: "c.pem", TLSKeyPath: "k.pem", MaxPayloadBytes: 100, MaxTTL: 2 * time.Hour, Profile: "2026-04", MaxSuspend: 7 * 24 * time.Hour,
		MaxParticipants: 9, MaxOpenSessions: 4, StartSkew: 0, LogLevel: "debug", LogFormat: "json",
		ShutdownGrace: time.Second, StreamHeartbeat: 15 * time.Second, EvictAfter: 5 * time.Minute,
		Limits: DefaultLimits(), Snapshots: DefaultSnapshots(), HTTP: DefaultHTTP(), NATS: DefaultNATS(), AdminAddr: "10.0.0.5:9100", AdminPprof: true, GCPercent: 300, MemoryLimit: 2048,
	}
	if c != want {
		t.Fatalf("after flags\n got %+v\nwant %+v", c, want)
	}
}

// checklist SEC-1 (RFC-MACP-0004 §2 "All MACP deployments MUST use encrypted
// transport"): without TLS the runtime refuses to start unless plaintext is
// explicitly allowed, and the error says how to fix it.
func TestValidateRequiresTransportSecurity(t *testing.T) {
	c := Default()
	err := c.Validate()
	if err == nil {
		t.Fatal("validated without TLS or insecure")
	}
	for _, s := range []string{"MACP_TLS_CERT_PATH", "MACP_TLS_KEY_PATH", "MACP_ALLOW_INSECURE"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not name %s: %v", s, err)
		}
	}
	c.TLSCertPath, c.TLSKeyPath = "cert.pem", "key.pem"
	if err := c.Validate(); err != nil {
		t.Fatalf("TLS configured: %v", err)
	}
	c.TLSKeyPath = ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MACP_TLS_KEY_PATH") {
		t.Fatalf("cert without key: %v", err)
	}
	c = Default()
	c.TLSKeyPath = "key.pem"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MACP_TLS_CERT_PATH") {
		t.Fatalf("key without cert: %v", err)
	}
}

// Validate reports every problem at once, each naming the setting (its
// environment variable) it is about.
func TestValidateListsAllProblems(t *testing.T) {
	c := Config{
		BindAddr:        "localhost",
		DataDir:         "",
		MemoryOnly:      false,
		TLSCertPath:     "cert.pem",
		MaxPayloadBytes: 0,
		MaxTTL:          0,
		MaxParticipants: 0,
		MaxOpenSessions: -1,
		StartSkew:       -time.Second,
		ShutdownGrace:   -time.Second,
		LogLevel:        "verbose",
		LogFormat:       "xml",
		Profile:         "2025-01",
		AdminAddr:       "9090",
		MemoryLimit:     -1,
		GCMinHeap:       -1,
		Snapshots:       DefaultSnapshots(),
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("validated")
	}
	for _, s := range []string{
		"MACP_BIND_ADDR", "MACP_DATA_DIR", "MACP_TLS_KEY_PATH", "MACP_MAX_PAYLOAD_BYTES", "MACP_MAX_TTL_MS",
		"MACP_MAX_PARTICIPANTS", "MACP_MAX_OPEN_SESSIONS", "MACP_START_SKEW_MS", "MACP_SHUTDOWN_GRACE_MS",
		"MACP_LOG_LEVEL", "MACP_LOG_FORMAT", "MACP_ADMIN_ADDR", "MACP_GC_PERCENT", "MACP_MEMORY_LIMIT_BYTES", "MACP_GC_MIN_HEAP_BYTES",
		"MACP_STREAM_BUFFER_BYTES", "MACP_PROFILE", "MACP_MAX_SUSPEND_MS", `"2025-01"`, `"localhost"`, `"verbose"`, `"xml"`, `"9090"`,
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not mention %s:\n%v", s, err)
		}
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 21 {
		t.Errorf("want 21 separate problems, got:\n%v", err)
	}
}

func TestValidateBounds(t *testing.T) {
	ok := func(mut func(*Config)) error {
		c := Default()
		c.AllowInsecure = true
		mut(&c)
		return c.Validate()
	}
	for name, mut := range map[string]func(*Config){
		"port 0":           func(c *Config) { c.BindAddr = "127.0.0.1:0" },
		"all interfaces":   func(c *Config) { c.BindAddr = ":50051" },
		"ipv6":             func(c *Config) { c.BindAddr = "[::1]:50051" },
		"payload 1":        func(c *Config) { c.MaxPayloadBytes = 1 },
		"payload 64 MiB":   func(c *Config) { c.MaxPayloadBytes = 64 << 20 },
		"ttl 1ms":          func(c *Config) { c.MaxTTL = time.Millisecond },
		"durable with dir": func(c *Config) { c.MemoryOnly = false },
		"skew unchecked":   func(c *Config) { c.StartSkew = 0 },
		"no grace":         func(c *Config) { c.ShutdownGrace = 0 },
		"warn/json":        func(c *Config) { c.LogLevel, c.LogFormat = "warn", "json" },
		"admin loopback":   func(c *Config) { c.AdminAddr = "127.0.0.1:9090" },
		"admin port 0":     func(c *Config) { c.AdminAddr, c.BindAddr = "127.0.0.1:0", "127.0.0.1:0" },
		"admin ipv6":       func(c *Config) { c.AdminAddr = "[::1]:9090" },
		"admin pprof":      func(c *Config) { c.AdminAddr, c.AdminPprof = "localhost:9090", true },
	} {
		if err := ok(mut); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, mut := range map[string]func(*Config){
		"payload over 64 MiB": func(c *Config) { c.MaxPayloadBytes = 64<<20 + 1 },
		"ttl under 1ms":       func(c *Config) { c.MaxTTL = time.Microsecond },
		"no port":             func(c *Config) { c.BindAddr = "127.0.0.1" },
		"admin no port":       func(c *Config) { c.AdminAddr = "127.0.0.1" },
	} {
		if err := ok(mut); err == nil {
			t.Errorf("%s validated", name)
		}
	}
}

func TestFromEnvIntegerOutOfRange(t *testing.T) {
	c := Default()
	err := c.FromEnv(env(map[string]string{"MACP_MAX_PAYLOAD_BYTES": "99999999999999999999"}))
	if err == nil || !strings.Contains(err.Error(), "MACP_MAX_PAYLOAD_BYTES") || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("err %v", err)
	}
}

// MACP_ADMIN_ADDR is optional ("" = no admin endpoint); when set it must be
// a host:port other than the gRPC address.
func TestValidateAdminAddr(t *testing.T) {
	for _, addr := range []string{"localhost", "127.0.0.1", "127.0.0.1:9090:1", "[::1", "::1:9090"} {
		c := Default()
		c.AllowInsecure = true
		c.AdminAddr = addr
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "MACP_ADMIN_ADDR (--admin-addr) "+strconv.Quote(addr)) {
			t.Errorf("AdminAddr %q: %v", addr, err)
		}
	}
	c := Default()
	c.AllowInsecure = true
	c.AdminAddr = c.BindAddr
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "must differ from MACP_BIND_ADDR") {
		t.Errorf("AdminAddr = BindAddr: %v", err)
	}
	c.AdminAddr = ""
	c.AdminPprof = true // no effect without an address, not an error
	if err := c.Validate(); err != nil {
		t.Errorf("AdminAddr empty: %v", err)
	}
}
