package main

import (
	"bytes"
	"context"
	"flag"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/config"
)

// issue 28: a misspelled MACP_* variable is an error for --check-config,
// named with the closest setting, and is reported beside other errors.
func TestCheckConfigRefusesUnknownVariables(t *testing.T) {
	cleanEnv(t, "MACP_ALLOW_INSECURE", "1", "MACP_HTTP_ADR", "127.0.0.1:8080")
	var stderr bytes.Buffer
	err := run([]string{"--check-config"}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "MACP_HTTP_ADR is not a macpd setting (did you mean MACP_HTTP_ADDR?)") {
		t.Fatalf("--check-config with MACP_HTTP_ADR: %v", err)
	}
	if strings.Contains(stderr.String(), "configuration ok") {
		t.Fatalf("stderr %q", stderr.String())
	}

	// The generic TLS error comes with the did-you-mean.
	cleanEnv(t, "MACP_ALLOW_INSECUR", "1")
	err = run(nil, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no transport security configured") ||
		!strings.Contains(err.Error(), "did you mean MACP_ALLOW_INSECURE?") {
		t.Fatalf("MACP_ALLOW_INSECUR: %v", err)
	}
}

// At start an unknown variable is a warning: macpd serves.
func TestStartWarnsOnUnknownVariables(t *testing.T) {
	cleanEnv(t, "MACP_ALLOW_INSECURE", "1", "MACP_MEMORY_ONLY", "1", "MACP_BIND_ADDR", "127.0.0.1:0",
		"MACP_HTTP_ADR", "127.0.0.1:8080", "MACP_LOG_LEVEL", "info")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prev := serveContext
	serveContext = func() (context.Context, context.CancelFunc) { return ctx, cancel }
	t.Cleanup(func() { serveContext = prev })
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(nil, &stderr) }()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(stderr.String(), "macpd serving") {
		select {
		case err := <-done:
			t.Fatalf("run ended: %v\n%s", err, stderr.String())
		case <-deadline:
			t.Fatalf("macpd did not start:\n%s", stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	out := stderr.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "did_you_mean=MACP_HTTP_ADDR") ||
		!strings.Contains(out, "MACP_HTTP_ADR is not a macpd setting") {
		t.Fatalf("no warning for MACP_HTTP_ADR:\n%s", out)
	}
}

// issue 28: -h lists every setting, those without a flag included (as
// whole names: MACP_AUTH_HS256_SECRET was missing while
// MACP_AUTH_HS256_SECRET_FILE hid it from a substring check), and points
// to the HTTP routes and the console.
func TestHelpNamesEverySettingWhole(t *testing.T) {
	cleanEnv(t)
	var stderr bytes.Buffer
	if err := run([]string{"-h"}, &stderr); err != nil {
		t.Fatal(err)
	}
	out := stderr.String()
	named := map[string]bool{}
	for _, n := range regexp.MustCompile(`MACP_[A-Z0-9_]+`).FindAllString(out, -1) {
		named[n] = true
	}
	for _, n := range config.KnownEnv() {
		if !named[n] {
			t.Errorf("-h does not list %s", n)
		}
	}
	for _, s := range []string{"/console/", "?agent=", "/macp/envelope", "/macp/ws", "/metrics", "MACP_HTTP_ADDR"} {
		if !strings.Contains(out, s) {
			t.Errorf("-h lacks %q", s)
		}
	}
	fs := flag.NewFlagSet("macpd", flag.ContinueOnError)
	cfg := config.Default()
	cfg.RegisterFlags(fs)
	only := envOnly(fs)
	if len(only) < 5 {
		t.Fatalf("envOnly %v", only)
	}
	for _, n := range only {
		if envOnlyHelp[n] == "" {
			t.Errorf("%s has no flag and no line in envOnlyHelp", n)
		}
	}
}
