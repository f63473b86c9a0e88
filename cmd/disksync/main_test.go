package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestDisksync(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"--dir", dir, "--duration", "50ms", "--record-size", "100", "--group", "1,8", "--json"}, &out, &errOut)
	if err != nil {
		t.Fatal(err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%q", out.String())
	}
	for i, want := range []int{1, 8} {
		var r Result
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatal(err)
		}
		if r.Group != want || r.Appends != r.Syncs*int64(want) || r.Syncs == 0 || r.AppendsPS <= 0 ||
			r.SyncP50Ms > r.SyncP99Ms || r.SyncP99Ms > r.SyncMaxMs || r.Sync != "fdatasync" {
			t.Errorf("%+v", r)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left files behind: %v", ents)
	}
	out.Reset()
	if err := run(context.Background(), []string{"--dir", dir, "--duration", "20ms", "--group", "4", "--sync", "fsync"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "appends/s") || !strings.Contains(out.String(), "fsync") {
		t.Fatalf("%q", out.String())
	}
}

func TestDisksyncUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, args := range [][]string{
		{},
		{"--dir", t.TempDir(), "--group", "0"},
		{"--dir", t.TempDir(), "--group", "x"},
		{"--dir", t.TempDir(), "--sync", "never"},
		{"--dir", t.TempDir(), "--record-size", "0"},
		{"--dir", "/nonexistent/dir", "--duration", "1ms"},
		{"--dir", t.TempDir(), "stray"},
	} {
		if err := run(context.Background(), args, &out, &errOut); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
