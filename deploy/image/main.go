// Command image builds macpd's container image as a tarball, without a
// container daemon and without a registry, and checks such a tarball.
//
//	go run . build --macpd BIN --macpctl BIN --arch amd64 --revision REV --created UNIX --out FILE
//	go run . verify --tar FILE --revision REV
//
// build writes a docker-archive tarball (the format of `docker save`, read
// by `docker load` and `podman load`) of one image for linux/ARCH: an empty
// base, one layer holding the two static binaries under /usr/local/bin,
// /etc/passwd and /etc/group naming the non-root user 65532 ("macpd"), and
// /data owned by it; the image runs macpd as 65532 with MACP_DATA_DIR=/data
// and MACP_BIND_ADDR=0.0.0.0:50051. Every timestamp (files, layer, config,
// history) is --created, usually the commit's time, so the same commit
// and Go toolchain give the same bytes and the same image digest. It
// prints the image digest.
//
// verify reads such a tarball, checks the configuration (user, entrypoint,
// architecture, the revision label), extracts macpd from the layer and
// runs `macpd --version`, which must name the revision: the binary in the
// image is the one built from that commit. It runs the binary, so the
// image's architecture must be the host's.
//
// This is its own module (deploy/image/go.mod): go-containerregistry is a
// dependency of the build tooling, not of macpd.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the numeric user and group the image runs as: not root, and the
// id distroless images use for "nonroot".
const User = 65532

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image build|verify [flags] (see the package doc)")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = buildCmd(os.Args[2:])
	case "verify":
		err = verifyCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: use build or verify", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// Options are build's inputs.
type Options struct {
	Macpd, Macpctl string    // paths of the linux/Arch binaries
	Arch           string    // GOARCH: amd64, arm64
	Revision       string    // the commit the binaries are built from
	Version        string    // a version label (the module version), may be ""
	Created        time.Time // every timestamp in the image
	Tag            string    // the repository:tag recorded in the tarball
}

func buildCmd(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var o Options
	var created int64
	var out string
	fs.StringVar(&o.Macpd, "macpd", "", "macpd binary for linux/ARCH (static: CGO_ENABLED=0)")
	fs.StringVar(&o.Macpctl, "macpctl", "", "macpctl binary for linux/ARCH")
	fs.StringVar(&o.Arch, "arch", "amd64", "image architecture (GOARCH)")
	fs.StringVar(&o.Revision, "revision", "", "git commit of the binaries (label org.opencontainers.image.revision)")
	fs.StringVar(&o.Version, "version", "", "version label (org.opencontainers.image.version)")
	fs.Int64Var(&created, "created", 0, "Unix time of every timestamp in the image (the commit's time: git log -1 --format=%ct)")
	fs.StringVar(&o.Tag, "tag", "", "repository:tag recorded in the tarball (default macpd:REVISION[:12])")
	fs.StringVar(&out, "out", "", "tarball to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Macpd == "" || o.Macpctl == "" || o.Revision == "" || out == "" || created <= 0 {
		return errors.New("build needs --macpd, --macpctl, --revision, --created and --out")
	}
	o.Created = time.Unix(created, 0).UTC()
	if o.Tag == "" {
		o.Tag = "macpd:" + o.Revision[:min(12, len(o.Revision))]
	}
	img, err := Build(o)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(o.Tag, name.WithDefaultRegistry(""))
	if err != nil {
		return fmt.Errorf("--tag %q: %w", o.Tag, err)
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", out, o.Tag, d)
	return nil
}

// Build assembles the image of o.
func Build(o Options) (v1.Image, error) {
	layerBytes, err := layerTar(o)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithCompressedCaching, tarball.WithMediaType(types.DockerLayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "deploy/image: macpd and macpctl (static, CGO_ENABLED=0), user 65532",
			Comment:   "revision " + o.Revision,
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = o.Arch, "linux"
	cf.Created = created
	labels := map[string]string{
		"org.opencontainers.image.title":    "macpd",
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   "https://github.com/macpd/macpd",
		"org.opencontainers.image.created":  o.Created.Format(time.RFC3339),
	}
	if o.Version != "" {
		labels["org.opencontainers.image.version"] = o.Version
	}
	cf.Config = v1.Config{
		User:       strconv.Itoa(User) + ":" + strconv.Itoa(User),
		Entrypoint: []string{"/usr/local/bin/macpd"},
		WorkingDir: "/data",
		Env: []string{
			"PATH=/usr/local/bin",
			"MACP_DATA_DIR=/data",
			"MACP_BIND_ADDR=0.0.0.0:50051",
		},
		ExposedPorts: map[string]struct{}{"50051/tcp": {}},
		Volumes:      map[string]struct{}{"/data": {}},
		Labels:       labels,
	}
	return mutate.ConfigFile(img, cf)
}

// layerTar returns the uncompressed layer: directories, the user and
// group files, /data owned by User, and the two binaries, all with
// o.Created as their time and in a fixed order.
func layerTar(o Options) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := o.Created
	dir := func(name string, uid int, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mt, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: mt, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nmacpd:x:%d:%d:macpd:/data:/sbin/nologin\n", User, User)
	group := fmt.Sprintf("root:x:0:\nmacpd:x:%d:\n", User)
	steps := []func() error{
		func() error { return dir("data", User, 0o750) },
		func() error { return dir("etc", 0, 0o755) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return dir("tmp", 0, 0o1777) },
		func() error { return dir("usr", 0, 0o755) },
		func() error { return dir("usr/local", 0, 0o755) },
		func() error { return dir("usr/local/bin", 0, 0o755) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	for _, b := range []struct{ name, path string }{{"macpctl", o.Macpctl}, {"macpd", o.Macpd}} {
		data, err := os.ReadFile(b.path)
		if err != nil {
			return nil, err
		}
		if err := file("usr/local/bin/"+b.name, 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func verifyCmd(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	path := fs.String("tar", "", "image tarball written by build")
	rev := fs.String("revision", "", "the commit `macpd --version` must name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" || *rev == "" {
		return errors.New("verify needs --tar and --revision")
	}
	line, err := Verify(*path, *rev)
	if err != nil {
		return err
	}
	fmt.Println("ok:", line)
	return nil
}

// Verify checks the image in the tarball at path and returns the output
// of its `macpd --version`.
func Verify(path, revision string) (string, error) {
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	want := strconv.Itoa(User) + ":" + strconv.Itoa(User)
	var problems []string
	if cf.Config.User != want {
		problems = append(problems, fmt.Sprintf("user %q, want %q", cf.Config.User, want))
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/usr/local/bin/macpd" {
		problems = append(problems, fmt.Sprintf("entrypoint %q", cf.Config.Entrypoint))
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		problems = append(problems, fmt.Sprintf("platform %s/%s, this host runs linux/%s", cf.OS, cf.Architecture, runtime.GOARCH))
	}
	if got := cf.Config.Labels["org.opencontainers.image.revision"]; got != revision {
		problems = append(problems, fmt.Sprintf("revision label %q, want %q", got, revision))
	}
	if len(problems) > 0 {
		return "", errors.New("image configuration: " + strings.Join(problems, "; "))
	}
	dir, err := os.MkdirTemp("", "macpd-image-verify")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "macpd")
	if err := extract(img, "usr/local/bin/macpd", bin); err != nil {
		return "", err
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	line := strings.TrimSpace(string(out))
	if err != nil {
		return "", fmt.Errorf("macpd --version from the image: %v: %s", err, line)
	}
	if !strings.Contains(line, "revision "+revision) {
		return "", fmt.Errorf("macpd --version from the image does not name revision %s: %s", revision, line)
	}
	return line, nil
}

// hostArch is this machine's GOARCH (the architecture verify can run).
func hostArch() string { return runtime.GOARCH }

// extract writes the file name of the image's flattened filesystem to dst
// (mode 0755).
func extract(img v1.Image, name, dst string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("%s is not in the image", name)
		}
		if err != nil {
			return err
		}
		if strings.TrimPrefix(h.Name, "/") != name {
			continue
		}
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
}
