#define _GNU_SOURCE
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>
#include <x86intrin.h>
static inline uint64_t t(void){ _mm_lfence(); uint64_t x=__rdtsc(); _mm_lfence(); return x;}
int main(int argc,char**argv){
  int NP = 64; long us = atol(argv[1]); size_t stride=argc>2?atol(argv[2]):4096+192;
  char *m = mmap(NULL, NP*stride+4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  int perm[64]; for(int i=0;i<NP;i++) perm[i]=i; srand(1); for(int i=NP-1;i>0;i--){int j=rand()%(i+1); int x=perm[i]; perm[i]=perm[j]; perm[j]=x;}
  for (int i=0;i<NP;i++) *(char**)(m+perm[i]*stride) = m+perm[(i+1)%NP]*stride;
  uint64_t a=0,b=0; int R=3000; char *p = m+perm[0]*stride;
  struct timespec ts={0,us*1000};
  for (int r=0;r<R;r++){
    uint64_t w=t(); while(t()-w < us*2300) ;
    uint64_t t0=t(); for(int i=0;i<NP;i++) p=*(char**)p; uint64_t t1=t(); a+=t1-t0;
    nanosleep(&ts,NULL);
    t0=t(); for(int i=0;i<NP;i++) p=*(char**)p; t1=t(); b+=t1-t0;
  }
  printf("%ld us: 64 dependent lines: after busy %.1f cycles/line, after sleep %.1f cycles/line %p\n", us, (double)a/R/NP, (double)b/R/NP, p);
}
