import subprocess, re, sys, collections
def prof(tag):
    out=subprocess.run(["perf","report","-i",f"{tag}.data","--stdio","-n","--sort","sym","-q"],capture_output=True,text=True).stdout
    d=collections.Counter()
    for line in out.splitlines():
        m=re.match(r"\s*([\d.]+)%\s+(\d+)\s+\[(.)\]\s+(.*)",line)
        if m: d[("u:" if m.group(3)=='.' else "k:")+m.group(4).strip()]+=int(m.group(2))
    q=int(open(f"{tag}.q").read())
    return {k:v*100.0/q for k,v in d.items()}
A=sys.argv[1].split(","); B=sys.argv[2].split(","); N=int(sys.argv[3]) if len(sys.argv)>3 else 25
pa=[prof(t) for t in A]; pb=[prof(t) for t in B]
def tot(ps,pre=""): return sum(sum(v for k,v in p.items() if k.startswith(pre)) for p in ps)/len(ps)
for pre in ["","u:","k:"]:
    print("total%s A %.3f B %.3f diff %+.3f"%(pre,tot(pa,pre),tot(pb,pre),tot(pb,pre)-tot(pa,pre)))
for t,p in zip(A+B,pa+pb): print(t,"%.3f"%sum(p.values()))
keys=set().union(*[p.keys() for p in pa+pb])
rows=[]
for k in keys:
    a=sum(p.get(k,0) for p in pa)/len(pa); b=sum(p.get(k,0) for p in pb)/len(pb)
    rows.append((b-a,a,b,k))
rows.sort(reverse=True)
print("diff(us/q) A B sym")
for r in rows[:N]: print("%+.3f %.3f %.3f %s"%r)
print("...")
for r in rows[-12:]: print("%+.3f %.3f %.3f %s"%r)
