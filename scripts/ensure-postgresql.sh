#!/usr/bin/env bash
# Makes sure PostgreSQL's server binaries (initdb, pg_ctl) are installed for the tests
# that start a throw-away server of their own (internal/testkit/pgtest: the PostgreSQL
# store's tests, the kill -9 and partition tests). When none is, installs Debian's
# postgresql package (only its binaries are used; the tests start and stop their own
# servers on temporary directories); where that is impossible it fails, saying why,
# rather than letting those tests fail later.
set -euo pipefail

if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1; then
  exit 0
fi

echo "installing postgresql from Debian packages for the PostgreSQL store's tests"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-postgresql: no PostgreSQL server binaries and no apt-get to install them: install" \
       "PostgreSQL (initdb and pg_ctl; the tests of store/pgstore, test/cluster and test/partition need them)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "ensure-postgresql: no PostgreSQL server binaries, and installing them needs root (or sudo):" \
         "run 'apt-get install -y postgresql' as root" >&2
    exit 1
  fi
fi
if ! { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; }; then
  echo "ensure-postgresql: apt-get could not install postgresql (offline? not Debian?):" \
       "install PostgreSQL by hand; the store tests need a real server" >&2
  exit 1
fi
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  echo "ensure-postgresql: the postgresql package installed no pg_ctl under /usr/lib/postgresql" >&2
  exit 1
fi
# Debian starts a cluster of its own on port 5432; the tests never use it.
echo "postgresql installed: $(ls -d /usr/lib/postgresql/*/bin | tail -1)"
