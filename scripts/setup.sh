#!/usr/bin/env bash
# Installs dsinfer's build dependencies from Debian's packages (Debian 12). Safe to re-run: it
# only calls apt-get when something is missing. The CUDA toolkit is optional (nvcc on PATH or in
# /usr/local/cuda turns the CUDA backend on).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config git
          nlohmann-json3-dev libcli11-dev libfmt-dev libutf8proc-dev libpcre2-dev
          libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev libopenmpi-dev openmpi-bin)
# Node.js and npm run the official `openai` client against the server in the tests (the package
# itself comes from the npm registry); a Node.js from elsewhere (e.g. NodeSource) is used as it is.
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
