package clikit

import (
	"strings"
	"testing"
)

// Connection flags may precede the command name; the first other
// argument is the command.
func TestSplitGlobal(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		pre       []string
		name      string
		rest      []string
		wantError bool
	}{
		{[]string{"list"}, nil, "list", []string{}, false},
		{[]string{"--addr", "h:1", "list", "--agent", "a"}, []string{"--addr", "h:1"}, "list", []string{"--agent", "a"}, false},
		{[]string{"--addr=h:1", "-insecure", "--timeout", "2s", "get", "X"}, []string{"--addr=h:1", "-insecure", "--timeout", "2s"}, "get", []string{"X"}, false},
		{[]string{"--insecure", "list"}, []string{"--insecure"}, "list", []string{}, false},
		{[]string{"--agent", "coord", "-h"}, []string{"--agent", "coord"}, "-h", []string{}, false},
		{[]string{"--version"}, nil, "--version", []string{}, false},
		{[]string{"--bogus", "list"}, nil, "--bogus", []string{"list"}, false},
		{[]string{"--addr"}, nil, "", nil, true},
		{nil, nil, "", nil, false},
	} {
		pre, name, rest, err := SplitGlobal(tc.args)
		if (err != nil) != tc.wantError || name != tc.name || strings.Join(pre, " ") != strings.Join(tc.pre, " ") || strings.Join(rest, " ") != strings.Join(tc.rest, " ") {
			t.Errorf("SplitGlobal(%q) = %q %q %q %v", tc.args, pre, name, rest, err)
		}
	}
}
