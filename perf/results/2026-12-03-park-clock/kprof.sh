#!/bin/bash
# kprof.sh record|stat NAME BIN NAMES [SECS]: BIN (a perf/ab "binary": dnslb, perf/ab-reflector,
# perf/ab-dnsdist) under the 30k-qps hit load over NAMES names, warmed, with
#   record: perf record -e cpu-clock -F 20000 -g of its threads (into NAME.perf.data)
#   stat:   perf stat of its threads' sendmmsg/recvmmsg calls, IPIs, wake-ups (into NAME.stat)
# All traffic on 127.0.0.1, bounded by dnsperf's -l.
set -u
MODE=$1 NAME=$2 BIN=$3 N=$4 SECS=${5:-8}
T=$(mktemp -d)
fp() { /usr/bin/python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
RP=$(fp) LP=$(fp)
/usr/bin/python3 -c "
with open('$T/names','w') as f:
    f.writelines('h%d.bench.example A\n' % i for i in range($N))"
taskset -c 0 /work/main/build-perf/perf/dnslb-perf-responder 127.0.0.1:$RP -t 1 >/dev/null 2>&1 & RPID=$!
printf 'setLocal("127.0.0.1:%s")\nnewServer({address="127.0.0.1:%s"})\nsetWorkerThreads(1)\nsetUDPMultipleMessagesVectorSize(32)\npc = newPacketCache(100000)\ngetPool(""):setCache(pc)\n' $LP $RP > $T/conf
taskset -c 1 $BIN -C $T/conf --supervised --disable-syslog >$T/log 2>&1 & DPID=$!
sleep 2
for i in 1 2; do dnsperf -s 127.0.0.1 -p $LP -d $T/names -c 1 -n 1 -q 30 >/dev/null 2>&1; done
taskset -c 0 dnsperf -s 127.0.0.1 -p $LP -d $T/names -c 1 -l 2 -Q 30000 -q 200 >/dev/null 2>&1
if [ "$MODE" = record ]; then
	perf record -e cpu-clock -F 20000 -g -p $DPID -o $NAME.perf.data -- sleep $SECS >/dev/null 2>&1 &
else
	perf stat -e syscalls:sys_enter_sendmmsg,syscalls:sys_enter_recvmmsg,ipi:ipi_send_cpu,sched:sched_waking,sched:sched_wake_idle_without_ipi,context-switches \
		--per-thread -p $DPID -o $NAME.stat -- sleep $SECS >/dev/null 2>&1 &
fi
PP=$!
sleep 0.3
taskset -c 0 dnsperf -s 127.0.0.1 -p $LP -d $T/names -c 1 -l $((SECS-1)) -Q 30000 -q 200 2>&1 | grep -E "Queries completed"
wait $PP
kill $DPID $RPID; wait 2>/dev/null; rm -rf $T
