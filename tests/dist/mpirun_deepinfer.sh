#!/usr/bin/env bash
# `deepinfer ARGS` run as `mpirun -np N deepinfer ARGS --expert-parallel`, so that test drivers
# which start and stop a one-process server (tests/sdk/test_sdk.py, tools/soak/soak.py: give
# this script as --serve) drive a multi-rank one unchanged.
#   DEEPINFER_CLI    the deepinfer executable (default: build/deepinfer of this checkout)
#   DEEPINFER_RANKS  N (default 2)
# A SIGTERM / SIGINT to this script becomes SIGUSR1 to mpirun, which forwards it to every rank:
# rank 0 drains its requests and the job stops cleanly (a SIGTERM to mpirun itself would kill
# the ranks a second later).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
cli="${DEEPINFER_CLI:-$here/../../build/deepinfer}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe --bind-to none -np "${DEEPINFER_RANKS:-2}" "$cli" "$@" --expert-parallel &
pid=$!
trap 'kill -USR1 "$pid" 2>/dev/null' TERM INT
while :; do
  wait "$pid"
  rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
exit "$rc"
