/* The same system calls as handoff_steps.c, warm, in a loop (20,000 times). Not part of the build.
 *   cc -O2 -o warm_steps warm_steps.c && ./warm_steps          (uses /dev/shm/pw) */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>
#include <time.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/stat.h>
static uint64_t now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
int main(){ system("rm -rf /dev/shm/pw; mkdir /dev/shm/pw"); int dfd=open("/dev/shm/pw",O_RDONLY|O_DIRECTORY);
 char db[32768]; uint64_t s[5]={0}; int n=20000;
 int t=openat(dfd,"token-1",O_CREAT|O_WRONLY,0644); close(t);
 for(int i=0;i<n;i++){
  int sp=openat(dfd,".",O_TMPFILE|O_WRONLY,0644); pwrite(sp,"rwdir-holder record.......",26,0);
  int pf=openat(dfd,"pending",O_CREAT|O_WRONLY,0644);
  lseek(dfd,0,SEEK_SET);
  uint64_t a=now(); linkat(sp,"",dfd,"m2",AT_EMPTY_PATH); uint64_t b=now(); unlinkat(dfd,"pending",0); uint64_t c=now();
  syscall(SYS_renameat2,dfd,(i%2)?"token-2":"token-1",dfd,(i%2)?"token-1":"token-2",1); uint64_t d=now();
  syscall(SYS_getdents64,dfd,db,sizeof db); syscall(SYS_getdents64,dfd,db,sizeof db); uint64_t e=now();
  s[0]+=b-a; s[1]+=c-b; s[2]+=d-c; s[3]+=e-d;
  unlinkat(dfd,"m2",0); close(sp); close(pf);
 }
 printf("warm: linkat %.2f unlink(open) %.2f rename %.2f getdents2 %.2f us\n", s[0]/1e3/n, s[1]/1e3/n, s[2]/1e3/n, s[3]/1e3/n);
}
