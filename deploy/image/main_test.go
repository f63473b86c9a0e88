package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeBinaries writes two scripts standing in for macpd and macpctl:
// "macpd --version" prints a line naming rev, like the real one.
func fakeBinaries(t *testing.T, rev string) (string, string) {
	dir := t.TempDir()
	macpd := filepath.Join(dir, "macpd")
	macpctl := filepath.Join(dir, "macpctl")
	if err := os.WriteFile(macpd, []byte("#!/bin/sh\necho \"macpd v0.0.0 (revision "+rev+") go1.26\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(macpctl, []byte("#!/bin/sh\necho macpctl\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return macpd, macpctl
}

func TestBuildIsReproducibleAndVerifies(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	macpd, macpctl := fakeBinaries(t, rev)
	o := Options{Macpd: macpd, Macpctl: macpctl, Arch: hostArch(), Revision: rev, Created: time.Unix(1764300000, 0).UTC(), Tag: "macpd:test"}
	a, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("two builds of the same inputs: %s and %s", da, db)
	}
	o2 := o
	o2.Created = o.Created.Add(time.Second)
	c, err := Build(o2)
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := c.Digest(); dc == da {
		t.Fatal("the timestamp does not reach the image")
	}

	// Every file carries the fixed time; the binaries are executable and
	// /data belongs to the non-root user.
	rc := mutate.Extract(a)
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[strings.TrimSuffix(h.Name, "/")] = h
		if !h.ModTime.Equal(o.Created) {
			t.Errorf("%s: time %v", h.Name, h.ModTime)
		}
	}
	for _, p := range []string{"usr/local/bin/macpd", "usr/local/bin/macpctl", "etc/passwd", "etc/group", "data", "tmp"} {
		if seen[p] == nil {
			t.Errorf("%s missing from the layer", p)
		}
	}
	if h := seen["data"]; h != nil && (h.Uid != User || h.Gid != User) {
		t.Errorf("/data owned by %d:%d", h.Uid, h.Gid)
	}
	if h := seen["usr/local/bin/macpd"]; h != nil && h.Mode&0o111 == 0 {
		t.Errorf("macpd mode %o", h.Mode)
	}

	path := filepath.Join(t.TempDir(), "image.tar")
	ref, err := name.NewTag(o.Tag, name.WithDefaultRegistry(""))
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, ref, a); err != nil {
		t.Fatal(err)
	}
	line, err := Verify(path, rev)
	if err != nil || !strings.Contains(line, rev) {
		t.Fatalf("Verify: %q %v", line, err)
	}
	if _, err := Verify(path, "ffffffffffffffffffffffffffffffffffffffff"); err == nil || !strings.Contains(err.Error(), "revision") {
		t.Fatalf("Verify with another revision: %v", err)
	}
}
