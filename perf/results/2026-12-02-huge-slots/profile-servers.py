#!/usr/bin/python3
# differential cpu-clock profile: floor vs dnslb, same load, kernel+user symbols per query
import os, subprocess, sys, time, socket, re
sys.path.insert(0, "/work/main/perf")
ROOT="/work/main"
RESP=f"{ROOT}/build-perf/perf/dnslb-perf-responder"
def free_port():
    s=socket.socket(); s.bind(("127.0.0.1",0)); p=s.getsockname()[1]; s.close(); return p
names=sys.argv[1]; secs=int(sys.argv[2]); servers=[a.split("=",1) for a in sys.argv[3:]]
procs=[]
rport=free_port()
procs.append(subprocess.Popen(["taskset","-c","0",RESP,f"127.0.0.1:{rport}","-t","1"],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL))
run=[]
for name,cmd in servers:
    port=free_port(); conf=f"/tmp/s18/{name}.conf"
    open(conf,"w").write(f'setLocal("127.0.0.1:{port}")\nnewServer({{address="127.0.0.1:{rport}"}})\nsetWorkerThreads(1)\nsetUDPMultipleMessagesVectorSize(32)\npc = newPacketCache(100000)\ngetPool(""):setCache(pc)\n')
    p=subprocess.Popen(["taskset","-c","1"]+cmd.split()+["-C",conf,"--supervised","--disable-syslog"],stdout=open(f"/tmp/s18/{name}.log","w"),stderr=subprocess.STDOUT)
    procs.append(p); run.append((name,port,p))
time.sleep(3)
def dnsperf(port,secs,qps=None,count=None):
    c=["taskset","-c","0","dnsperf","-s","127.0.0.1","-p",str(port),"-d",names]
    c+= ["-n",str(count)] if count else ["-l",str(secs),"-Q",str(qps)]
    out=subprocess.run(c,capture_output=True,text=True).stdout
    return int(re.search(r"Queries completed:\s+(\d+)",out).group(1))
try:
    for name,port,p in run:
        dnsperf(port,0,count=2); dnsperf(port,2,qps=30000)
    order=[r for r in run]+[r for r in reversed(run)]
    for i,(name,port,p) in enumerate(order):
        data=f"/tmp/s18/{name}-{i}.data"
        rec=subprocess.Popen(["perf","record","-q","-F","10000","-e","cpu-clock","-p",str(p.pid),"-o",data,"--","sleep",str(secs+0.5)],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
        time.sleep(0.2)
        q=dnsperf(port,secs,qps=30000)
        rec.wait()
        open(f"/tmp/s18/{name}-{i}.q","w").write(str(q))
        print(name,i,q,flush=True)
finally:
    for p in procs: p.terminate()
