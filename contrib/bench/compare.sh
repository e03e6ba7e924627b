#!/usr/bin/env bash
# compare.sh BASE ROUNDS OUT: CPU and allocations per bus round trip and per
# signed call, the working tree against git revision BASE. Both trees' test
# binaries are built first, then run in turn, ROUNDS times, so that the
# machine's other load falls on both alike; benchstat prints medians, the
# change and whether it is significant. Runs and the table go to OUT.
# BusServerCPU is the CPU of a `meshagent relay` process alone per bus
# round trip: both trees' binaries, driven by this tree's clients.
set -euo pipefail
base=${1:?BASE revision}
rounds=${2:-6}
out=${3:?output folder}
go=${GO:-go}
benchstat=(${go} run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da)

root=$(git rev-parse --show-toplevel)
mkdir -p "$out"
tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree/base" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git -C "$root" worktree add --detach "$tree/base" "$base" >/dev/null

for side in base new; do
	dir=$root
	[ "$side" = base ] && dir=$tree/base
	for pkg in bus node; do
		(cd "$dir/$pkg" && "$go" test -c -o "$tree/$side-$pkg.test") >/dev/null
	done
	(cd "$dir" && "$go" build -o "$tree/$side-meshagent" ./cmd/meshagent)
done
(cd "$root/cmd/meshagent" && "$go" test -c -o "$tree/servercpu.test") >/dev/null

: >"$out/base.txt"
: >"$out/new.txt"
for r in $(seq "$rounds"); do
	for side in base new; do
		# Each binary runs in its own package folder, as go test would.
		(cd "$root/bus" && "$tree/$side-bus.test" -test.run '^$' -test.bench 'BusCPUPerTrip' \
			-test.benchtime 20000x -test.benchmem) | grep '^Benchmark' >>"$out/$side.txt"
		(cd "$root/node" && GOMAXPROCS=1 "$tree/$side-node.test" -test.run '^$' \
			-test.bench 'RequestResponse/serial/signed-call' -test.benchtime 20000x -test.benchmem) |
			grep '^Benchmark' >>"$out/$side.txt"
		(cd "$root/cmd/meshagent" && "$tree/servercpu.test" -test.run '^$' -test.bench 'BusServerCPU' \
			-test.benchtime 20000x -bench.server="$tree/$side-meshagent") | grep '^Benchmark' >>"$out/$side.txt"
	done
	echo "round $r of $rounds done" >&2
done
(cd "$out" && "${benchstat[@]}" base.txt new.txt) | tee "$out/benchstat.txt"
