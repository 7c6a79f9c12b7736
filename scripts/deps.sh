#!/usr/bin/env bash
# Installs the Debian packages Kaon's tests and benchmarks drive for real.
# Idempotent: does nothing when everything is present.
set -euo pipefail
PKGS=(curl davix fuse3 attr strace fio xrootd-client xrootd-server xrootd-server-plugins python3-xrootd
      gfal2 gfal2-util-scripts python3-gfal2 gfal2-plugin-http gfal2-plugin-xrootd
      etcd-server etcd-client librados-dev scitokens-cpp xrootd-scitokens-plugins openssl
      globus-proxy-utils voms-clients voms-clients-java krb5-kdc krb5-admin-server krb5-user
      chromium chromium-driver
      prometheus)  # promtool: integration/health and integration/ha check /metrics with it
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The development Ceph cluster's packages (integration/ceph, docs/CEPH.md).
"$(dirname "$0")/ceph-dev.sh" install
