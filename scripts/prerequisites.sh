#!/usr/bin/env bash
# Checks what building and testing Airtime needs, installs what can be installed, and says exactly
# what is missing otherwise. `--for-tests` also checks what only the tests need (a browser, clang and lld).
set -euo pipefail

fail() { echo "airtime: $*" >&2; exit 1; }

command -v cargo >/dev/null || fail "cargo is not installed: install Rust with rustup (https://rustup.rs)"

# The dashboard (web/) is a Vite + TypeScript app built by `make web` and embedded in the control
# plane: the build needs Node.js 20 (20.19 or later) and npm.
node_hint="install Node.js 20 and npm (https://nodejs.org, or: apt-get install -y nodejs npm, or nvm install 20)"
command -v node >/dev/null || fail "Node.js is not installed (the dashboard in web/ is built with it); $node_hint"
command -v npm >/dev/null || fail "npm is not installed (the dashboard in web/ is built with it); $node_hint"
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' \
  || fail "Node.js $(node --version) is too old for the dashboard's build (Vite needs 20.19 or later); $node_hint"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  echo "airtime: installing the wasm32-unknown-unknown target (policies compile to it)"
  rustup target add wasm32-unknown-unknown \
    || fail "could not install the wasm32-unknown-unknown target; run: rustup target add wasm32-unknown-unknown"
fi

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    echo "airtime: starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 1 30); do pg_up && break; sleep 1; done
  fi
fi
pg_up || fail "PostgreSQL is not answering on 127.0.0.1:5432; start it (trust auth for user postgres)"

# The dashboard's browser test drives Debian's headless Chromium with playwright-core (web/'s npm
# dependencies): needed for tests only.
if [ "${1:-}" = "--for-tests" ] && ! [ -x /usr/bin/chromium ]; then
  browser_hint="install it with: apt-get install -y chromium"
  [ "$(id -u)" -eq 0 ] || fail "chromium is missing (the dashboard's browser test drives /usr/bin/chromium); $browser_hint (as root)"
  command -v apt-get >/dev/null || fail "chromium is missing and apt-get is not available; install Chromium at /usr/bin/chromium (Debian: $browser_hint)"
  echo "airtime: installing chromium (the dashboard's browser test)"
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; }
  apt_install || { DEBIAN_FRONTEND=noninteractive apt-get update && apt_install; } \
    || fail "could not install chromium with apt-get; $browser_hint"
  [ -x /usr/bin/chromium ] || fail "/usr/bin/chromium is still missing after installing chromium; $browser_hint"
fi

# The container stories run a real engine: Debian's Podman with runc, and an image built from
# busybox-static (no registry is reachable): needed for tests only.
if [ "${1:-}" = "--for-tests" ] && { ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! [ -x /bin/busybox ]; }; then
  podman_hint="install them with: apt-get install -y podman runc busybox-static"
  [ "$(id -u)" -eq 0 ] || fail "podman, runc or busybox-static is missing (the container stories need them); $podman_hint (as root)"
  command -v apt-get >/dev/null || fail "podman, runc or busybox is missing and apt-get is not available; install Podman, runc and a static busybox (Debian: $podman_hint)"
  echo "airtime: installing podman, runc and busybox-static (the container stories)"
  apt_install_p() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends podman runc busybox-static; }
  apt_install_p || { DEBIAN_FRONTEND=noninteractive apt-get update && apt_install_p; } \
    || fail "could not install podman, runc and busybox-static with apt-get; $podman_hint"
  command -v podman >/dev/null || fail "podman is still missing after installing it; $podman_hint"
fi

# The C policy's test builds policies/c-first-fit with clang's wasm32 target and wasm-ld (lld): needed
# for tests only (without them that test says it is skipped).
if [ "${1:-}" = "--for-tests" ] && { ! command -v clang >/dev/null || ! command -v wasm-ld >/dev/null; }; then
  c_hint="install them with: apt-get install -y clang lld"
  [ "$(id -u)" -eq 0 ] || fail "clang or wasm-ld is missing (the C policy's test builds a wasm32 module with them); $c_hint (as root)"
  command -v apt-get >/dev/null || fail "clang or wasm-ld is missing and apt-get is not available; install clang and lld (Debian: $c_hint)"
  echo "airtime: installing clang and lld (the C policy's test builds a wasm32 module with them)"
  apt_install_c() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends clang lld; }
  apt_install_c || { DEBIAN_FRONTEND=noninteractive apt-get update && apt_install_c; } \
    || fail "could not install clang and lld with apt-get; $c_hint"
  command -v wasm-ld >/dev/null || fail "wasm-ld is still missing after installing lld; $c_hint"
fi

# The fault stories: a network partition is a network namespace cut off (`ip netns`, iproute2, as
# root), and PostgreSQL is restarted and stopped on a cluster of the test's own (Debian's
# postgresql-common: pg_createcluster, pg_ctlcluster), never the shared server. Needed for tests only.
if [ "${1:-}" = "--for-tests" ]; then
  [ "$(id -u)" -eq 0 ] || fail "the fault stories need root (a network namespace per partition, a PostgreSQL cluster of their own); run the tests as root"
  if ! command -v ip >/dev/null; then
    ip_hint="install it with: apt-get install -y iproute2"
    command -v apt-get >/dev/null || fail "ip (iproute2) is missing and apt-get is not available; $ip_hint"
    echo "airtime: installing iproute2 (the partition story)"
    apt_install_ip() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2; }
    apt_install_ip || { DEBIAN_FRONTEND=noninteractive apt-get update && apt_install_ip; } || fail "could not install iproute2; $ip_hint"
  fi
  command -v pg_createcluster >/dev/null && command -v pg_ctlcluster >/dev/null \
    || fail "pg_createcluster and pg_ctlcluster are missing (the database fault story makes a cluster of its own); install Debian's postgresql-common with the PostgreSQL server"
fi

# The database failover story runs PostgreSQL under Patroni with etcd (Debian's patroni, etcd-server
# and python3-etcd, the etcd client Patroni's etcd3 store imports): needed for tests only.
if [ "${1:-}" = "--for-tests" ] && { ! command -v patroni >/dev/null || ! command -v etcd >/dev/null || ! /usr/bin/python3 -c 'import etcd' 2>/dev/null; }; then
  ha_hint="install them with: apt-get install -y patroni etcd-server python3-etcd"
  command -v apt-get >/dev/null || fail "patroni or etcd is missing and apt-get is not available; install Patroni and etcd (Debian: $ha_hint)"
  echo "airtime: installing patroni, etcd-server and python3-etcd (the database failover story)"
  apt_install_ha() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends patroni etcd-server python3-etcd; }
  apt_install_ha || { DEBIAN_FRONTEND=noninteractive apt-get update && apt_install_ha; } || fail "could not install patroni and etcd-server; $ha_hint"
  command -v patroni >/dev/null && command -v etcd >/dev/null || fail "patroni or etcd is still missing after installing them; $ha_hint"
fi
