#!/bin/sh
# Install ftwbridge into a fresh virtual environment from a folder of wheels, offline:
#   deploy/install.sh WHEELS PREFIX
# WHEELS holds the bridge's wheel and every dependency's (`pip wheel . -w WHEELS` makes them);
# PREFIX becomes the venv (PREFIX/bin/ftwbridge). The container image runs this as its install
# step, and tests/ops/test_deploy.py runs it as a user other than root.
set -eu
wheels=$1
prefix=$2
python3 -m venv "$prefix"
"$prefix/bin/pip" install --quiet --no-cache-dir --no-index --find-links "$wheels" ftwbridge
"$prefix/bin/ftwbridge" --version
