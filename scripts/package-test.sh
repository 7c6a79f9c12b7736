#!/usr/bin/env bash
# CI check of the Debian package (scripts/test.sh runs it): builds it,
# checks its contents, installs it with dpkg -i, checks the stamped
# version and commit, verifies every systemd unit with systemd-analyze
# (which exits 0 on many errors: any output fails), and purges it again,
# leaving no /usr/bin/kaon and no kaon user behind. Seconds once the Go
# build cache holds the binary. Needs root for dpkg; without it (or when
# a kaon not from this package is installed) only the contents are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
version=0.0.0~ci1
deb=$(VERSION=$version COMMIT=$commit scripts/package.sh "$out")
[ "$deb" = "$out/kaon_${version}_$(dpkg --print-architecture).deb" ] || { echo "package-test: built $deb" >&2; exit 1; }

contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/kaon ./usr/lib/systemd/system/kaon-up.service ./usr/lib/systemd/system/kaon-mgm.service \
	./usr/lib/systemd/system/kaon-fst.service ./etc/kaon/up.toml ./etc/kaon/mgm.toml ./etc/kaon/fst.toml \
	./usr/share/man/man1/kaon.1.gz ./usr/share/man/man1/kaon-up.1.gz ./usr/share/man/man1/kaon-fs-ls.1.gz \
	./usr/share/bash-completion/completions/kaon ./usr/share/zsh/vendor-completions/_kaon \
	./usr/share/fish/vendor_completions.d/kaon.fish; do
	grep -qxF "$f" <<<"$contents" || { echo "package-test: $deb lacks $f" >&2; exit 1; }
done

if [ "$(id -u)" != 0 ]; then
	echo "package-test: not root: $deb built and its contents checked, not installed"
	exit 0
fi
if [ -e /usr/bin/kaon ] && ! dpkg -S /usr/bin/kaon >/dev/null 2>&1; then
	echo "package-test: /usr/bin/kaon exists and is not from a package: not installing over it"
	exit 0
fi
had_user=$(getent passwd kaon >/dev/null && echo yes || echo no)
# One package test at a time on this machine; dpkg's own lock may be held
# by an apt run: wait for it (bounded).
exec 9>/var/lock/kaon-package-test.lock
flock -w 600 9 || { echo "package-test: another package test held the lock for 10 min" >&2; exit 1; }
dpkg_retry() {
	local deadline=$((SECONDS + 600))
	until "$@" >"$out/dpkg.log" 2>&1; do
		if ! grep -q "lock" "$out/dpkg.log" || ((SECONDS > deadline)); then
			cat "$out/dpkg.log" >&2
			return 1
		fi
		sleep 5
	done
}
cleanup() {
	dpkg_retry dpkg --purge kaon || echo "package-test: dpkg --purge kaon failed: remove it by hand" >&2
	rm -rf "$out"
}
trap cleanup EXIT
dpkg_retry dpkg -i "$deb"

v=$(/usr/bin/kaon version | head -1)
[[ $v == "kaon $version $commit "* ]] || { echo "package-test: kaon version says '$v', want version $version and commit $commit" >&2; exit 1; }
[ "$(/usr/bin/kaon --version)" = "$v" ] || { echo "package-test: kaon --version differs from kaon version" >&2; exit 1; }
getent passwd kaon >/dev/null || { echo "package-test: no kaon user after dpkg -i" >&2; exit 1; }
for u in kaon-up kaon-mgm kaon-fst; do
	msg=$(systemd-analyze verify "/usr/lib/systemd/system/$u.service" 2>&1) || true
	if [ -n "$msg" ]; then
		echo "package-test: systemd-analyze verify $u.service:" >&2
		echo "$msg" >&2
		exit 1
	fi
done

trap 'rm -rf "$out"' EXIT
dpkg_retry dpkg --purge kaon
[ ! -e /usr/bin/kaon ] || { echo "package-test: /usr/bin/kaon left after dpkg --purge" >&2; exit 1; }
if [ "$had_user" = no ] && getent passwd kaon >/dev/null; then
	echo "package-test: the kaon user is left after dpkg --purge" >&2
	exit 1
fi
echo "package-test: $deb installed, version $version $commit, units verified, purged"
