package gctune

import (
	"errors"
	"math"
	"testing"
)

func env(vars map[string]string, files map[string]string) Env {
	return Env{
		Getenv: func(k string) string { return vars[k] },
		ReadFile: func(f string) ([]byte, error) {
			if v, ok := files[f]; ok {
				return []byte(v), nil
			}
			return nil, errors.New("no such file")
		},
	}
}

func TestDecide(t *testing.T) {
	const v2, v1 = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	for _, tc := range []struct {
		name  string
		pct   int
		limit int64
		vars  map[string]string
		files map[string]string
		want  Settings
	}{
		{"defaults without cgroup", 200, 0, nil, nil, Settings{200, "config", math.MaxInt64, "none", 0}},
		{"cgroup v2 limit", 200, 0, nil, map[string]string{v2: "1000000000\n"}, Settings{200, "config", 900000000, "cgroup", 0}},
		{"cgroup v2 max", 200, 0, nil, map[string]string{v2: "max\n"}, Settings{200, "config", math.MaxInt64, "none", 0}},
		{"cgroup v1 limit", 200, 0, nil, map[string]string{v1: "2000000000"}, Settings{200, "config", 1800000000, "cgroup", 0}},
		{"cgroup v1 unlimited", 200, 0, nil, map[string]string{v1: "9223372036854771712"}, Settings{200, "config", math.MaxInt64, "none", 0}},
		{"configured limit wins over cgroup", 150, 5000, nil, map[string]string{v2: "1000000000"}, Settings{150, "config", 5000, "config", 0}},
		{"GOGC and GOMEMLIMIT win", 200, 5000, map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}, nil, Settings{50, "GOGC", -1, "GOMEMLIMIT", 0}},
		{"GOGC=off", 200, 0, map[string]string{"GOGC": "off"}, nil, Settings{-1, "GOGC", math.MaxInt64, "none", 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.pct, tc.limit, 0, env(tc.vars, tc.files)); got != tc.want {
				t.Fatalf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}
