#!/usr/bin/env bash
# containerd 1.7.24 with NRI (Debian 13's package, extracted into .cache/containerd-nri): scripts/runtimes.sh
# containerd-1.7, under the name the tests and benchmarks have always called. Prints the directory of its binaries.
exec bash "$(dirname "$0")/runtimes.sh" containerd-1.7
