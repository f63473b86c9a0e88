package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/clikit"
)

// macpctl policy register|list|get|unregister|watch against a real
// runtime (RFC-MACP-0012 §7).
func TestPolicyCommands(t *testing.T) {
	a := startApp(t)
	r := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1", "MACP_ADDR": a.Addr(), "MACP_AGENT": "admin"}}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watched := make(chan result, 1)
	var watchOut syncBuffer
	go func() {
		var errOut syncBuffer
		code := run(ctx, []string{"policy", "watch", "--count", "2"}, func(k string) string { return r.env[k] }, &watchOut, &errOut)
		watched <- result{code, watchOut.String(), errOut.String()}
	}()
	// Register only once the watch has printed its initial list.
	for !strings.Contains(watchOut.String(), "\n") {
		select {
		case <-ctx.Done():
			t.Fatal("policy watch printed no initial list")
		case <-time.After(5 * time.Millisecond):
		}
	}

	res := r.ok("policy", "register", "--id", "policy.test.majority", "--mode", "macp.mode.decision.v1",
		"--description", "majority vote", "--rules", `{"voting":{"algorithm":"majority"}}`)
	d := obj(t, res.out)
	wantField(t, d, "policy.test.majority", "policy_id")
	wantField(t, d, "macp.mode.decision.v1", "mode")
	if !strings.Contains(d["rules"].(string), "majority") {
		t.Fatalf("rules: %v", d)
	}
	res = r.ok("policy", "get", "policy.test.majority")
	wantField(t, obj(t, res.out), "majority vote", "description")

	res = r.ok("policy", "list", "--mode", "macp.mode.task.v1")
	if strings.Contains(res.out, "policy.test.majority") || !strings.Contains(res.out, "policy.default") {
		t.Fatalf("list --mode task: %s", res.out)
	}
	res = r.ok("policy", "list")
	if !strings.Contains(res.out, "policy.test.majority") {
		t.Fatalf("list: %s", res.out)
	}

	// Bad rules are refused with the MACP code; the registry is unchanged.
	res = r.run("policy", "register", "--id", "policy.test.bad", "--mode", "macp.mode.decision.v1", "--rules", `{"voting":{"algorithm":"coin-flip"}}`)
	if res.code != clikit.ExitRejected || !strings.Contains(res.errOut, "error: INVALID_POLICY_DEFINITION") {
		t.Fatalf("bad rules: %+v", res)
	}
	res = r.run("policy", "get", "policy.test.bad")
	if res.code != clikit.ExitRejected || !strings.Contains(res.errOut, "UNKNOWN_POLICY_VERSION") {
		t.Fatalf("get bad: %+v", res)
	}

	// --schema-version registers a newer rule schema (docs/policies.md);
	// a version-2 key is refused under version 1, a misspelled key always.
	res = r.ok("policy", "register", "--id", "policy.test.v3", "--mode", "macp.mode.decision.v1", "--schema-version", "3",
		"--rules", `{"voting":{"algorithm":"majority"},"objection_handling":{"critical_objection_action":"finalize_decline"}}`)
	if v, _ := obj(t, res.out)["schema_version"].(float64); v != 3 {
		t.Fatalf("schema_version: %s", res.out)
	}
	for _, tc := range []struct{ version, rules string }{
		{"1", `{"objection_handling":{"critical_objection_action":"deny"}}`},
		{"3", `{"votin":{"algorithm":"majority"}}`},
		{"4", `{}`},
	} {
		res = r.run("policy", "register", "--id", "policy.test.refused", "--mode", "macp.mode.decision.v1", "--schema-version", tc.version, "--rules", tc.rules)
		if res.code != clikit.ExitRejected || !strings.Contains(res.errOut, "INVALID_POLICY_DEFINITION") {
			t.Fatalf("schema_version %s rules %s: %+v", tc.version, tc.rules, res)
		}
	}
	r.ok("policy", "unregister", "policy.test.v3")

	w := <-watched // the initial list, then the registration
	lines := w.lines()
	if w.code != 0 || len(lines) != 2 || strings.Contains(lines[0], "policy.test.majority") || !strings.Contains(lines[1], "policy.test.majority") {
		t.Fatalf("watch: %+v", w)
	}

	res = r.ok("policy", "unregister", "policy.test.majority")
	wantField(t, obj(t, res.out), true, "ok")
	res = r.run("policy", "unregister", "policy.test.majority")
	if res.code != clikit.ExitRejected || !strings.Contains(res.errOut, "error: ") {
		t.Fatalf("unregister twice: %+v", res)
	}

	for _, args := range [][]string{
		{"policy"}, {"policy", "frobnicate"}, {"policy", "register"}, {"policy", "get"},
		{"policy", "get", "a", "b"}, {"policy", "list", "--id", "x"}, {"policy", "register", "--id", "x", "--rules", "{"},
	} {
		if res := r.run(args...); res.code != clikit.ExitUsage {
			t.Errorf("macpctl %s: exit %d, want %d (%s)", strings.Join(args, " "), res.code, clikit.ExitUsage, res.errOut)
		}
	}
}
