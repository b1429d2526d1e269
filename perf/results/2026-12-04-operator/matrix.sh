#!/bin/bash
# issue 35's factor matrix: 3 rounds each, fixed rate only, then profiles
cd /work/main
R=3
run() { name=$1; shift; echo "=== $name: $*"; timeout 900 perf/run --rounds $R --no-max --dnslb build-perf/dnslb --outdir /tmp/pm/$name "$@" > /tmp/pm/$name.log 2>&1; grep -E "above the floor|ratio dnslb/dnsdist, CPU|floor \(reflector\)|load average" /tmp/pm/$name.log; }
rm -rf /tmp/pm; mkdir -p /tmp/pm
uptime
run A-lab --pin --config bench --names-style bench --hot-names 10000
run B-unpinned --config bench --names-style bench --hot-names 10000
run C-realistic --config bench --names-style realistic
run D-operator
run E-operator-pinned --pin
R=1 run P-profile --profile --servers dnslb,dnsdist
uptime
