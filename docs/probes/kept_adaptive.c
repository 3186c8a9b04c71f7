/* A reader's calls alone, as in kept_reader.c, with the kept file used only while the
 * reads come alone (docs/notes/contention.md §21). Not part of the build.
 *   cc -O2 -o kept_adaptive kept_adaptive.c && for p in 1 2 4; do ./kept_adaptive 4 $p 256; done
 * Each process keeps its released reader's file under a .tmp- name (renameat2 at the
 * first keep, then pwrite + linkat per read, as kept_reader.c's mode 2), unless its
 * listing showed another process's reader file within its last K reads (argument 3;
 * K = 0: only the read that saw one): then it lets the kept file go (unlinkat + close)
 * and makes a file per read (O_TMPFILE, write, linkat; close after the unlink), as
 * kept_reader.c's mode 0. MODE 5 keeps always. Prints each process's mean time per
 * read in microseconds, and how many reads used the kept file. Uses
 * /dev/shm/kept_reader4. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
struct d64 { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; };
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static char buf[32768]; static char rec[234];
static int others(int n, const char* mine){ int c=0; for(int o=0;o<n;){ struct d64*d=(void*)(buf+o); if(!strncmp(d->name,".slave_lock-",12)&&strcmp(d->name,mine)) c++; o+=d->reclen;} return c; }
int main(int argc,char**argv){
  if(argc<4){fprintf(stderr,"usage: %s MODE PROCS K\n",argv[0]);return 2;}
  int mode=atoi(argv[1]); int procs=atoi(argv[2]); int n=100000;
  const char*sd="/dev/shm/kept_reader4"; mkdir(sd,0755);
  for(int p=0;p<procs;p++) if(fork()==0){
    int dfd=open(sd,O_RDONLY|O_DIRECTORY); int lfd=open(sd,O_RDONLY|O_DIRECTORY);
    memset(rec,'x',sizeof rec); struct stat st; char a[64],cur[64]; int kf=-1; long kept=0,fresh=0; int cool=0; int K=atoi(argv[3]);
    snprintf(cur,64,".tmp-%d",getpid());
    double t0=now();
    for(int i=0;i<n;i++){
      snprintf(a,64,".slave_lock-%d-%d",getpid(),i);
      fstatat(AT_FDCWD,sd,&st,AT_SYMLINK_NOFOLLOW);
      int f;
      if(kf>=0){ pwrite(kf,rec,sizeof rec,0); linkat(kf,"",dfd,a,AT_EMPTY_PATH); f=kf; kept++; }
      else { f=openat(dfd,".",O_WRONLY|O_CLOEXEC|O_TMPFILE,0644); write(f,rec,sizeof rec); linkat(f,"",dfd,a,AT_EMPTY_PATH); fresh++; }
      lseek(lfd,0,SEEK_SET); int got=syscall(SYS_getdents64,lfd,buf,sizeof buf); int oth=others(got,a); syscall(SYS_getdents64,lfd,buf,sizeof buf);
      if(oth) cool=K; else if(cool) cool--; int alone = (mode==4) ? cool==0 : 1;
      if(f==kf){
        unlinkat(dfd,a,0);
        if(!alone){ unlinkat(dfd,cur,0); close(kf); kf=-1; }
      } else if(alone){
        renameat2(dfd,a,dfd,cur,RENAME_NOREPLACE); kf=f;
      } else { unlinkat(dfd,a,0); close(f); }
    }
    printf("mode %d, %d processes: %.3f us per read (kept %ld fresh %ld)\n",mode,procs,(now()-t0)/n/1e3,kept,fresh);
    if(kf>=0) unlinkat(dfd,cur,0);
    exit(0);
  }
  while(wait(NULL)>0) {}
  rmdir(sd);
  return 0;
}
