#!/usr/bin/env bash
# Builds the Debian package: dist/kaon_VERSION_ARCH.deb with usr/bin/kaon
# (release version and commit stamped with -ldflags, not read from VCS
# metadata), the systemd units (deploy/systemd), an example configuration
# per role (/etc/kaon, conffiles), man pages (kaon gen-man), shell
# completions and the Grafana dashboard. dpkg-deb only: no network.
#
#   scripts/package.sh                   # version from git describe, commit from git
#   VERSION=1.2.0 COMMIT=abc123 scripts/package.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}

commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
if [ -z "${VERSION:-}" ]; then
	if tag=$(git describe --tags --exact-match 2>/dev/null); then
		VERSION=${tag#v}
	else # no release tag here: 0.0.0~git<commit time>.<short commit>, ordered by time
		when=$(git log -1 --format=%cd --date=format:%Y%m%d%H%M%S 2>/dev/null || echo 0)
		VERSION="0.0.0~git${when}.${commit:0:12}"
	fi
fi
VERSION=${VERSION#v}
[[ $VERSION =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || { echo "package.sh: VERSION $VERSION is not a Debian version" >&2; exit 2; }
goarch=${GOARCH:-$(go env GOARCH)}
case $goarch in
amd64 | arm64 | ppc64el | s390x) arch=$goarch ;;
386) arch=i386 ;;
arm) arch=armhf ;;
ppc64le) arch=ppc64el ;;
*) echo "package.sh: no Debian architecture for GOARCH $goarch" >&2; exit 2 ;;
esac

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d "$root/DEBIAN" "$root/usr/bin" "$root/usr/lib/systemd/system" "$root/etc/kaon" \
	"$root/usr/share/man/man1" "$root/usr/share/bash-completion/completions" \
	"$root/usr/share/zsh/vendor-completions" "$root/usr/share/fish/vendor_completions.d" "$root/usr/share/doc/kaon"

# The tests' build flags (only the link differs): the build cache serves it.
GOARCH=$goarch go build -buildvcs=false \
	-ldflags "-s -w -X main.version=$VERSION -X main.commit=$commit" -o "$root/usr/bin/kaon" ./cmd/kaon
# Man pages and completions come from the binary built for this host.
host=$stage/kaon-host
if [ "$goarch" = "$(go env GOHOSTARCH)" ]; then
	host=$root/usr/bin/kaon
else
	go build -buildvcs=false -ldflags "-X main.version=$VERSION -X main.commit=$commit" -o "$host" ./cmd/kaon
fi
"$host" gen-man "$stage/man"
for f in "$stage"/man/*.1; do gzip -9n <"$f" >"$root/usr/share/man/man1/$(basename "$f").gz"; done
"$host" completion bash >"$root/usr/share/bash-completion/completions/kaon"
"$host" completion zsh >"$root/usr/share/zsh/vendor-completions/_kaon"
"$host" completion fish >"$root/usr/share/fish/vendor_completions.d/kaon.fish"

install -m 0644 deploy/systemd/kaon-up.service deploy/systemd/kaon-mgm.service deploy/systemd/kaon-fst.service \
	"$root/usr/lib/systemd/system/"
install -m 0644 deploy/config/up.toml deploy/config/mgm.toml deploy/config/fst.toml "$root/etc/kaon/"
install -m 0644 deploy/grafana/kaon.json "$root/usr/share/doc/kaon/grafana-kaon.json"
printf 'Kaon, built from commit %s.\nLicense and sources: the Kaon repository.\n' "$commit" >"$root/usr/share/doc/kaon/copyright"

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: kaon
Version: $VERSION
Architecture: $arch
Maintainer: Kaon developers <kaon@localhost>
Installed-Size: $size
Depends: adduser, libc6
Section: net
Priority: optional
Homepage: https://github.com/kaon-storage/kaon
Description: storage system for scientific data (namespace, storage servers, XRootD and HTTP)
 One binary: the namespace server (kaon mgm), storage servers (kaon fst),
 both in one process (kaon up), root:// and HTTP/WebDAV endpoints, FUSE
 mounts and the operator CLI. The systemd units kaon-up, kaon-mgm and
 kaon-fst run the roles as the kaon user with the settings in /etc/kaon.
CONTROL
printf '/etc/kaon/up.toml\n/etc/kaon/mgm.toml\n/etc/kaon/fst.toml\n' >"$root/DEBIAN/conffiles"
cat >"$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
	if ! getent passwd kaon >/dev/null; then
		adduser --system --group --home /var/lib/kaon --no-create-home --quiet kaon
	fi
	install -d -o kaon -g kaon -m 0750 /var/lib/kaon
	if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
fi
POSTINST
cat >"$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
# Purge removes the kaon user; the data in /var/lib/kaon is kept.
if [ "$1" = purge ] && getent passwd kaon >/dev/null; then
	deluser --system --quiet kaon || true
fi
POSTRM
cat >"$root/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	for u in kaon-up kaon-mgm kaon-fst; do systemctl stop "$u.service" 2>/dev/null || true; done
fi
PRERM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm" "$root/DEBIAN/prerm"

mkdir -p "$out"
deb=$out/kaon_${VERSION}_${arch}.deb
dpkg-deb --root-owner-group -Zgzip --build "$root" "$deb" >/dev/null
echo "$deb"
