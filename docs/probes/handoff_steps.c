/* The system calls of an rwdir hand-off, timed step by step right after the wake-up.
 * Not part of the build; a probe behind docs/notes/handoff.md ("Where the time goes").
 *   cc -O2 -o handoff_steps handoff_steps.c && ./handoff_steps 0 && ./handoff_steps 1
 * 0: a holder removes "master" (fstatat + unlink) while a waiter blocks in ppoll on an
 *    inotify watch; the waiter then reads the event, links a prepared O_TMPFILE, unlinks
 *    "pending", renames "token-1" to "token-2" (RENAME_NOREPLACE) and lists twice.
 * 1: the same wake-up with flock(2). Uses /dev/shm/probe. Prints medians in microseconds.
 * YIELD=1 adds a sched_yield() after the event is read (it changed nothing measurable). */
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
#include <sys/syscall.h>
#include <stdint.h>
#include <sched.h>
static uint64_t now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
#define D "/dev/shm/probe"
#define N 300
static int cmp(const void*a,const void*b){uint64_t x=*(uint64_t*)a,y=*(uint64_t*)b;return x<y?-1:x>y;}
static double med(uint64_t*v,int n){qsort(v,n,8,cmp);return v[n/2]/1000.0;}
static void mk(const char*n){int fd=open(n,O_CREAT|O_WRONLY|O_TRUNC,0644);write(fd,"x",1);close(fd);}
int main(int argc,char**argv){
  int mode=atoi(argv[1]); /* 0 = lockfile sequence, 1 = flock */
  int rp[2],tp[2],gp[2]; pipe(rp); pipe(tp); pipe(gp); /* rp: waiter->holder ready; tp: waiter->holder results */
  system("rm -rf " D "; mkdir -p " D);
  chdir(D);
  pid_t w=fork();
  if(w==0){
    int dfd=open(D,O_RDONLY|O_DIRECTORY);
    int in=inotify_init1(IN_NONBLOCK|IN_CLOEXEC); inotify_add_watch(in,D,IN_DELETE);
    char buf[4096]; char db[32768];
    for(int i=0;i<N;i++){
      uint64_t ts[8]={0}; char g; read(gp[0],&g,1);
      if(mode==0){
        int sp=openat(dfd,".",O_TMPFILE|O_WRONLY,0644); pwrite(sp,"rwdir-holder record.......",26,0);
        lseek(dfd,0,SEEK_SET);
        while(read(in,buf,sizeof buf)>0){}
        char c=1; write(rp[1],&c,1);
        struct pollfd p={in,POLLIN,0};
        ppoll(&p,1,NULL,NULL); ts[0]=now();
        read(in,buf,sizeof buf); if(getenv("YIELD")) sched_yield(); ts[1]=now();
        linkat(sp,"",dfd,"m2",AT_EMPTY_PATH); ts[2]=now();
        unlinkat(dfd,"pending",0); ts[3]=now();
        syscall(SYS_renameat2,dfd,"token-1",dfd,"token-2",1); ts[4]=now();
        syscall(SYS_getdents64,dfd,db,sizeof db); syscall(SYS_getdents64,dfd,db,sizeof db); ts[5]=now();
        close(sp);
      } else {
        int fd=open("f",O_RDONLY);
        char c=1; write(rp[1],&c,1);
        flock(fd,LOCK_SH); ts[0]=now(); flock(fd,LOCK_UN); close(fd);
      }
      write(tp[1],ts,sizeof ts);
    }
    _exit(0);
  }
  uint64_t d[8][N], rel[N];
  for(int i=0;i<N;i++){
    int hfd=-1;
    if(mode==0){ unlink("m2"); unlink("token-2"); mk("master"); mk("pending"); mk("token-1"); hfd=open("master",O_RDONLY);}
    else { mk("f"); hfd=open("f",O_RDONLY); flock(hfd,LOCK_EX);}
    char c=1; write(gp[1],&c,1); read(rp[0],&c,1);
    struct timespec s={0,2000000+rand()%4000000}; nanosleep(&s,NULL);
    uint64_t t0=now(); struct stat st;
    if(mode==0){ fstatat(AT_FDCWD,"master",&st,AT_SYMLINK_NOFOLLOW); unlink("master"); }
    else close(hfd);
    uint64_t t1=now();
    if(mode==0) close(hfd);
    uint64_t ts[8]; read(tp[0],ts,sizeof ts);
    rel[i]=t1-t0; d[0][i]=ts[0]-t0;
    for(int k=1;k<6;k++) d[k][i]= mode==0 ? ts[k]-ts[k-1] : 0;
  }
  waitpid(w,NULL,0);
  printf("%s: release %.1f  wake(t'-t) %.1f", mode?"flock":"lockfile", med(rel,N), med(d[0],N));
  if(mode==0){ const char*nm[]={"","read","linkat","unlink","rename","getdents2"};

    for(int k=1;k<6;k++){ printf("  %s %.1f",nm[k],med(d[k],N)); }
  }
  printf(" us\n");
  return 0;
}
