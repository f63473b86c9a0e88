#!/usr/bin/env bash
# make release: static macpd and macpctl for linux and darwin on amd64 and
# arm64, the container image tarballs for linux/amd64 and linux/arm64, and
# SHA256SUMS over all of them, in ${DIST:-dist}/ (docs/deploy.md).
#
# Versions come from git: Go stamps each binary with the module version
# and the commit (-buildvcs=true; `macpd --version` prints them), so this
# needs a git checkout. Builds are reproducible: -trimpath, CGO_ENABLED=0,
# and the image's timestamps are the commit's time, so the same commit and
# Go toolchain give the same bytes (compare SHA256SUMS).
#
#   TARGETS="linux/amd64" scripts/release.sh   # a subset
#   IMAGES="" scripts/release.sh               # binaries only
set -euo pipefail
cd "$(dirname "$0")/.."
dist=${DIST:-dist}
targets=${TARGETS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
images=${IMAGES-linux/amd64 linux/arm64}
rev=$(git rev-parse HEAD)
created=$(git log -1 --format=%ct HEAD)
version=$(git describe --tags --always --dirty 2>/dev/null || echo "$rev")
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "release: the checkout has uncommitted changes; the binaries will say 'modified'" >&2
fi
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
# Go stamps VCS information only when the repository root has a .git
# directory: a git worktree (.git is a file) or an export gets none, and
# the binaries could not say which commit they are.
if [ ! -d .git ]; then
  echo "release: $(pwd) is not a git clone (.git is not a directory): Go would not stamp the commit into the binaries; run it in a clone" >&2
  exit 1
fi
# GOFLAGS may say -buildvcs=false (CI does, for its test builds): a release
# is stamped.
export CGO_ENABLED=0 GOFLAGS="-buildvcs=true -trimpath"
for t in $(printf '%s\n' $targets $images | sort -u); do
  os=${t%/*} arch=${t#*/}
  for cmd in macpd macpctl; do
    out="$dist/$cmd-$os-$arch"
    echo "build $out"
    GOOS=$os GOARCH=$arch go build -ldflags='-s -w' -o "$out" "./cmd/$cmd"
    go version -m "$out" | grep -q "vcs.revision=$rev" || { echo "release: $out carries no vcs.revision=$rev" >&2; exit 1; }
  done
done
tool="$dist/.image-tool"
if [ -n "$images" ]; then
  (cd deploy/image && GOOS= GOARCH= CGO_ENABLED=0 go build -o "$tool" .)
  for t in $images; do
    arch=${t#*/}
    "$tool" build --macpd "$dist/macpd-linux-$arch" --macpctl "$dist/macpctl-linux-$arch" --arch "$arch" \
      --revision "$rev" --version "$version" --created "$created" --tag "macpd:${rev:0:12}-$arch" \
      --out "$dist/macpd-image-linux-$arch.tar"
  done
fi
# Only what this run's targets produced, so a subset's SHA256SUMS is exact.
files=()
for t in $targets; do files+=("macpd-${t%/*}-${t#*/}" "macpctl-${t%/*}-${t#*/}"); done
for t in $images; do files+=("macpd-image-linux-${t#*/}.tar"); done
(cd "$dist" && sha256sum "${files[@]}" > SHA256SUMS)
echo "$dist/SHA256SUMS:"
cat "$dist/SHA256SUMS"
