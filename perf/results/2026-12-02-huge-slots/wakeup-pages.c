// wake-up TLB/cache cost: receiver blocks in recv on UDP, sender on other CPU sends every PERIOD us.
// after each wake: dependent chase over K nodes; mode 0: K nodes on K distinct pages (stride 4096+64),
// mode 1: K nodes packed in consecutive lines (K/64 pages). Reports TSC cycles per chase.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <x86intrin.h>
#include <time.h>
#include <sys/mman.h>
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
int main(int argc,char**argv){
  int K=atoi(argv[1]), mode=atoi(argv[2]), period=atoi(argv[3]), n=atoi(argv[4]);
  int s=socket(AF_INET,SOCK_DGRAM,0); struct sockaddr_in a={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)};
  bind(s,(void*)&a,sizeof a); socklen_t l=sizeof a; getsockname(s,(void*)&a,&l);
  if(fork()==0){pin(0);int c=socket(AF_INET,SOCK_DGRAM,0);struct timespec ts={0,period*1000L};
    for(int i=0;i<n+10;i++){sendto(c,"x",1,0,(void*)&a,sizeof a);nanosleep(&ts,0);} _exit(0);}
  pin(1);
  size_t stride = mode==0 ? 4096+64*((unsigned)0) : 64;
  char *m=mmap(0,(size_t)K*4096*2+4096,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  memset(m,1,(size_t)K*4096*2);
  // nodes: node i at m + i*stride (+ (i%64)*64 in mode 0 to spread sets)
  void **nodes[4096];
  for(int i=0;i<K;i++) nodes[i]=(void**)(m+(size_t)i*stride + (mode==0? (size_t)(i%64)*64:0));
  // random order chain
  int perm[4096]; for(int i=0;i<K;i++)perm[i]=i; srand(1); for(int i=K-1;i>0;i--){int j=rand()%(i+1);int t=perm[i];perm[i]=perm[j];perm[j]=t;}
  for(int i=0;i<K;i++) *nodes[perm[i]]=(void*)nodes[perm[(i+1)%K]];
  char buf[64]; uint64_t tot=0; int cnt=0;
  for(int i=0;i<n;i++){ recv(s,buf,sizeof buf,0);
    uint64_t t0=__rdtsc(); void **p=nodes[perm[0]]; for(int k=0;k<K;k++) p=(void**)*p; uint64_t t1=__rdtsc();
    if(p==0)puts(""); if(i>=10){tot+=t1-t0;cnt++;} }
  printf("K=%d mode=%s period=%dus: %.0f cycles per chase, %.1f per node\n",K,mode?"packed":"pages",period,(double)tot/cnt,(double)tot/cnt/K);
  return 0;}
