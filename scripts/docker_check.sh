#!/usr/bin/env bash
# Build the Dockerfile's CPU image with docker or podman, then run in it what a user runs first: `tsctl --help`, a
# micro `tsctl train` into a runs folder mounted from the host, and `tsctl report` on that run. Prints the build
# time, the image size and where the run's files landed (docs/docker.md).
#
#   scripts/docker_check.sh                                         # FROM python:3.11-slim, torch from PyTorch's CPU index
#   scripts/docker_check.sh --base localhost/debian-python:bookworm --torch-index ''   # a local base, the host's pip only
#
# Options:
#   --base IMAGE         the CPU stage's base (Dockerfile ARG BASE; any image with python3 >= 3.11 and its venv module)
#   --torch-index URL    where the CPU torch comes from (ARG TORCH_INDEX; '' leaves it to the pip settings below)
#   --engine NAME        docker or podman (default: the first whose `info` answers)
#   --tag NAME           the image's name (default tsctl-cpu)
#   --runs DIR           a new or empty host folder mounted as /work/runs, kept (default: a temporary one, removed)
# The host's pip settings (`pip config list` and PIP_* variables: index-url, extra-index-url, find-links, cert,
# constraint, trusted-host) reach the image's installs as build arguments, never its environment or files; with
# podman the local paths they name (a wheel folder, a file:// index, a CA bundle) are mounted read-only for the
# build under /dev/shm/pip-host (docker build cannot mount them: they are left out, with a warning). The build
# uses the host network.
# The micro train runs with OMP_NUM_THREADS from the caller (1 if unset) and a read-only root filesystem: the
# container writes only to its volumes. Its files are owned by the invoking user (rootless podman keeps the
# user's id; docker runs as --user "$(id -u):$(id -g)"); run as root, the folder is given to the image's user
# (uid 10001).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BASE="" TORCH_INDEX="__default__" ENGINE="" TAG="tsctl-cpu" RUNS=""
die() { echo "error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --base|--torch-index|--engine|--tag|--runs) [ $# -ge 2 ] || die "$1 needs a value: see $0 --help" ;;
    esac
    case "$1" in
        --base) BASE="$2"; shift 2 ;;
        --torch-index) TORCH_INDEX="$2"; shift 2 ;;
        --engine) ENGINE="$2"; shift 2 ;;
        --tag) TAG="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1: see $0 --help" ;;
    esac
done

[ -z "$RUNS" ] || [ ! -e "$RUNS" ] || [ -z "$(ls -A "$RUNS")" ] || die "--runs $RUNS is not empty: give a new or empty folder"

if [ -z "$ENGINE" ]; then
    for candidate in docker podman; do
        if command -v "$candidate" >/dev/null && "$candidate" info >/dev/null 2>&1; then ENGINE="$candidate"; break; fi
    done
    [ -n "$ENGINE" ] || die "neither docker nor podman answers \`info\`: start the docker engine or install podman (docs/docker.md)"
fi
case "$ENGINE" in docker|podman) ;; *) die "--engine $ENGINE is not one this script knows: use docker or podman" ;; esac
command -v "$ENGINE" >/dev/null || die "--engine $ENGINE is not installed: install it or use the other engine"

# The host's pip settings as build arguments, and (podman) the local paths they name as read-only build mounts.
# The mount root is on the build container's /dev/shm, a tmpfs: the mount points leave nothing in the image.
build_args=() mounts=()
if [ "$ENGINE" = podman ]; then how=(--mount-root /dev/shm/pip-host); else how=(--remote-only); fi
settings="$(python3 "$ROOT/scripts/docker_pip_settings.py" "${how[@]}")" || die "could not read the host's pip settings"
while IFS=$'\t' read -r kind name value; do
    case "$kind" in
        arg) build_args+=(--build-arg "$name=$value") ;;
        mount) mounts+=(--volume "$name:$value:ro") ;;
        skipped) echo "warning: docker build cannot mount host paths: pip's $value $name left out" >&2 ;;
    esac
done <<< "$settings"
[ -n "$BASE" ] && build_args+=(--build-arg "BASE=$BASE")
[ "$TORCH_INDEX" != "__default__" ] && build_args+=(--build-arg "TORCH_INDEX=$TORCH_INDEX")

echo "[1/4] $ENGINE build --build-arg DEVICE=cpu${BASE:+ --build-arg BASE=$BASE} -t $TAG ($ROOT)"
start=$(date +%s)
"$ENGINE" build --network host --build-arg DEVICE=cpu "${build_args[@]}" "${mounts[@]}" -t "$TAG" "$ROOT"
build_seconds=$(( $(date +%s) - start ))
size=$("$ENGINE" image inspect --format '{{.Size}}' "$TAG")

echo "[2/4] $ENGINE run $TAG --help, and as the image's user"
for help in "" --help; do
    [[ "$("$ENGINE" run --rm "$TAG" $help)" == *"Usage: tsctl"* ]] || die "$ENGINE run $TAG $help printed no tsctl help"
done
user=$("$ENGINE" run --rm --entrypoint id "$TAG" -u)
[ "$user" != 0 ] || die "the image runs as root"

# The runs folder, writable by the container's user; its files end up the invoking user's (see the header).
if [ -n "$RUNS" ]; then
    mkdir -p "$RUNS"; RUNS="$(cd "$RUNS" && pwd)"; keep=1
else
    RUNS="$(mktemp -d "${TMPDIR:-/tmp}/tsctl-docker-runs.XXXXXX")"; keep=0
fi
run_as=()
if [ "$(id -u)" = 0 ]; then
    chown "$user" "$RUNS"
elif [ "$ENGINE" = podman ]; then
    run_as=(--userns=keep-id)
else
    run_as=(--user "$(id -u):$(id -g)")
fi
read_only=(--read-only)
[ "$ENGINE" = docker ] && read_only+=(--tmpfs /tmp)  # podman's --read-only mounts a tmpfs on /tmp itself
job=(train model=micro trainer=micro engine.max_new_tokens=24)

echo "[3/4] $ENGINE run -v $RUNS:/work/runs $TAG ${job[*]} (OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}, read-only root)"
start=$(date +%s)
"$ENGINE" run --rm "${read_only[@]}" "${run_as[@]}" -e "OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}" -e TSCTL_NO_PROGRESS=1 \
    -v "$RUNS:/work/runs" "$TAG" "${job[@]}"
train_seconds=$(( $(date +%s) - start ))
manifests=$(find "$RUNS" -mindepth 3 -maxdepth 3 -name manifest.json -not -path "$RUNS/_models/*")
[ "$(echo "$manifests" | grep -c .)" = 1 ] || die "expected one run folder under $RUNS, found: ${manifests:-none}"
run="$(dirname "$manifests")"
relative="runs/${run#"$RUNS"/}"

echo "[4/4] $ENGINE run -v $RUNS:/work/runs $TAG report $relative"
"$ENGINE" run --rm "${read_only[@]}" "${run_as[@]}" -e "OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}" -e TSCTL_NO_PROGRESS=1 \
    -v "$RUNS:/work/runs" "$TAG" report "$relative"
[ -n "$(find "$run/plots" -type f 2>/dev/null)" ] || die "tsctl report wrote nothing under $run/plots"
unreadable=$(find "$RUNS" ! -readable | head -3)
[ -z "$unreadable" ] || die "files the container wrote are not readable here: $unreadable"

owner=$(stat -c '%u' "$run/manifest.json")
echo "ok: image $TAG ($ENGINE) $(( size / 1000000 )) MB, built in ${build_seconds} s; runs as uid $user; micro train ${train_seconds} s;" \
    "run folder $run (files owned by uid $owner, readable here)"
if [ "$keep" = 0 ]; then rm -rf "$RUNS"; fi
