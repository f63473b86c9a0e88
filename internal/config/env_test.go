package config

import (
	"flag"
	"regexp"
	"slices"
	"testing"
)

// KnownEnv is derived from FromEnv: it holds the settings of every part of
// the configuration, the environment-only secrets included, sorted.
func TestKnownEnv(t *testing.T) {
	known := KnownEnv()
	for _, n := range []string{"MACP_BIND_ADDR", "MACP_DATA_DIR", "MACP_ALLOW_INSECURE", "MACP_AUTH_HS256_SECRET",
		"MACP_AUTH_TOKENS_JSON", "MACP_HTTP_ADDR", "MACP_NATS_TOKEN", "MACP_REPLAY_WINDOW", "MACP_SNAPSHOT_DIR",
		"MACP_MAX_CONNECTIONS", "MACP_SESSION_RETENTION_SECS", "MACP_GC_MIN_HEAP_BYTES"} {
		if !slices.Contains(known, n) {
			t.Errorf("KnownEnv lacks %s", n)
		}
	}
	if !slices.IsSorted(known) || len(slices.Compact(slices.Clone(known))) != len(known) {
		t.Errorf("KnownEnv is not sorted and unique: %v", known)
	}
	for _, n := range OtherEnv {
		if slices.Contains(known, n) {
			t.Errorf("%s is in OtherEnv and is a macpd setting", n)
		}
	}
}

// Every MACP_* name a flag's usage mentions is read by FromEnv: a flag
// documented with a variable that does nothing would mislead.
func TestFlagUsagesNameKnownVariables(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("macpd", flag.ContinueOnError)
	c.RegisterFlags(fs)
	known := KnownEnv()
	re := regexp.MustCompile(`MACP_[A-Z0-9_]+`)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		for _, name := range re.FindAllString(f.Usage, -1) {
			n++
			if !slices.Contains(known, name) {
				t.Errorf("flag -%s names %s, which FromEnv does not read", f.Name, name)
			}
		}
	})
	if n < 50 {
		t.Fatalf("only %d MACP_* names in the flags' usage", n)
	}
}

func TestCheckEnv(t *testing.T) {
	got := CheckEnv([]string{
		"PATH=/usr/bin",
		"MACP_HTTP_ADR=127.0.0.1:8080",   // issue 28: no HTTP listener, no warning
		"MACP_ALLOW_INSECUR=1",           // issue 28: the generic TLS message only
		"MACP_BIND_ADDR=127.0.0.1:50051", // known
		"MACP_ADDR=127.0.0.1:50051",      // macpctl's
		"MACP_IT_GRPC_ADDR=x",            // a script's
		"MACP_FROBNICATE=1",              // unknown, nothing close
		"MACP_DATADIR=/tmp/x",            // a missing underscore
		"MACP_EMPTY_TYPO=",               // empty is unset
		"MACP_HTTP_ADR=again",            // reported once
		"macp_bind_addr=lowercase",       // not MACP_
	})
	want := []UnknownEnv{
		{"MACP_ALLOW_INSECUR", "MACP_ALLOW_INSECURE"},
		{"MACP_DATADIR", "MACP_DATA_DIR"},
		{"MACP_FROBNICATE", ""},
		{"MACP_HTTP_ADR", "MACP_HTTP_ADDR"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("CheckEnv:\n got %v\nwant %v", got, want)
	}
	if s := got[3].String(); s != "MACP_HTTP_ADR is not a macpd setting (did you mean MACP_HTTP_ADDR?)" {
		t.Errorf("message %q", s)
	}
	if s := got[2].String(); s != "MACP_FROBNICATE is not a macpd setting (macpd -h lists them)" {
		t.Errorf("message %q", s)
	}
	var environ []string
	for _, n := range KnownEnv() {
		environ = append(environ, n+"=1")
	}
	if got := CheckEnv(environ); len(got) != 0 {
		t.Errorf("known settings reported: %v", got)
	}
}
