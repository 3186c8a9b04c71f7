/* How a waiter blocks on inotify, and what that costs a hand-off. Not part of the build;
 * a probe behind docs/notes/handoff.md ("What would meet it").
 *   cc -O2 -o wake_variants wake_variants.c && ./wake_variants V
 * t = the holder right before its release action, t' = the waiter right after its
 * blocking call returns; prints the median and p90 over 300 hand-offs, in microseconds.
 * Uses /dev/shm/probe. The holder sleeps 2-12 ms before each release.
 * V 0: flock(2), the release is the holder's close.
 * V 1: ppoll (1 s timeout) on inotify; the holder unlinks a file no descriptor holds.
 * V 2: as 1, but the holder keeps a descriptor open across the unlink, as rwdir does.
 * V 3: as 2, ppoll without a timeout.
 * V 4: as 2, a blocking read of the inotify descriptor (no timeout possible).
 * V 5: as 2, with rwdir's fstatat (W8) before the unlink.
 * V 6: as 2, epoll_wait (1 s timeout). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <sys/inotify.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/epoll.h>
#include <stdint.h>
static uint64_t now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
#define D "/dev/shm/probe"
#define N 300
static int cmp(const void*a,const void*b){uint64_t x=*(uint64_t*)a,y=*(uint64_t*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int v=atoi(argv[1]);
  int rp[2],tp[2],gp[2]; pipe(rp); pipe(tp); pipe(gp);
  system("rm -rf " D "; mkdir -p " D);
  chdir(D);
  pid_t w=fork();
  if(w==0){
    int in=inotify_init1((v==4?0:IN_NONBLOCK)|IN_CLOEXEC); inotify_add_watch(in,D,IN_DELETE|IN_MOVED_FROM);
    int ep=epoll_create1(0); struct epoll_event ee={.events=EPOLLIN}; epoll_ctl(ep,EPOLL_CTL_ADD,in,&ee);
    char buf[4096];
    for(int i=0;i<N;i++){
      uint64_t t1=0; char g; read(gp[0],&g,1);
      if(v==0){
        int fd=open("f",O_RDONLY); char c=1; write(rp[1],&c,1);
        flock(fd,LOCK_SH); t1=now(); flock(fd,LOCK_UN); close(fd);
      } else {
        if(v!=4) while(read(in,buf,sizeof buf)>0){}
        char c=1; write(rp[1],&c,1);
        if(v==4){ read(in,buf,sizeof buf); t1=now(); }
        else if(v==6){ struct epoll_event o; epoll_wait(ep,&o,1,1000); t1=now(); read(in,buf,sizeof buf);}
        else { struct pollfd p={in,POLLIN,0}; struct timespec to={1,0};
          ppoll(&p,1,v==3?NULL:&to,NULL); t1=now(); read(in,buf,sizeof buf);}
      }
      write(tp[1],&t1,8);
    }
    _exit(0);
  }
  uint64_t d[N];
  for(int i=0;i<N;i++){
    int hfd=-1;
    if(v==0){ hfd=open("f",O_CREAT|O_RDWR,0644); flock(hfd,LOCK_EX);} 
    else { int fd=open("m",O_CREAT|O_WRONLY|O_TRUNC,0644); write(fd,"rwdir-holder record",19);
      if(v==1) close(fd); else hfd=fd; }
    char g=1; write(gp[1],&g,1); char c; read(rp[0],&c,1);
    struct timespec s={0,2000000+ (rand()%10000000)}; nanosleep(&s,NULL);
    uint64_t t0=now();
    if(v==0){ close(hfd); }
    else { if(v==5){struct stat st; fstatat(AT_FDCWD,"m",&st,AT_SYMLINK_NOFOLLOW);} unlink("m"); if(hfd>=0) close(hfd);} 
    uint64_t t1; read(tp[0],&t1,8); d[i]=t1-t0;
  }
  waitpid(w,NULL,0);
  qsort(d,N,8,cmp);
  printf("v%d median %.1f p90 %.1f\n",v,d[N/2]/1000.0,d[N*9/10]/1000.0);
  return 0;
}
