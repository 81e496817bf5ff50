#!/usr/bin/env bash
# Makes sure a Chromium is on PATH for the dashboard's browser test
# (cmd/meshnode/dashboard_test.go drives it headless through chromedp). When none is,
# installs Debian's chromium package; where that is impossible it fails, saying why,
# rather than letting the test run without a browser.
set -euo pipefail

for name in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$name" >/dev/null 2>&1; then
    exit 0
  fi
done

echo "installing chromium from Debian packages for the dashboard browser test"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: no Chromium on PATH and no apt-get to install it: install Chromium" \
       "(the dashboard test, cmd/meshnode/dashboard_test.go, needs a real browser)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "ensure-chromium: no Chromium on PATH, and installing it needs root (or sudo):" \
         "run 'apt-get install -y chromium' as root" >&2
    exit 1
  fi
fi
if ! { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }; then
  echo "ensure-chromium: apt-get could not install chromium (offline? not Debian?):" \
       "install Chromium by hand; the dashboard test needs a real browser" >&2
  exit 1
fi
if ! command -v chromium >/dev/null 2>&1; then
  echo "ensure-chromium: the chromium package installed no chromium command" >&2
  exit 1
fi
echo "chromium installed: $(command -v chromium)"
