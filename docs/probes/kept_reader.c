/* A reader's acquire+release made of system calls alone, four ways, by P processes at
 * once in one directory (docs/notes/contention.md §20). Not part of the build.
 *   cc -O2 -o kept_reader kept_reader.c && for m in 0 1 2 3; do ./kept_reader $m 1; ./kept_reader $m 2; done
 * Mode 0: a file per read (fstatat of the state directory, O_TMPFILE, write, linkat,
 *         lseek + getdents64 x2, unlinkat, close), as before the kept file.
 * Mode 1: the kept file renamed to the reader's name and back (pwrite, renameat2 x2).
 * Mode 2: the kept file linked to the reader's name and unlinked (pwrite, linkat,
 *         unlinkat), its .tmp- name kept in the same directory (branch
 *         wip/kept-reader-file).
 * Mode 3: as mode 2, with the kept file's own name in a subdirectory (.kept/), out of
 *         the directory every acquisition lists.
 * Each process prints its mean time per read in microseconds. Uses /dev/shm/kept_reader. */
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
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static char buf[32768]; static char rec[234];
int main(int argc,char**argv){
  if(argc<3){fprintf(stderr,"usage: %s MODE PROCS\n",argv[0]);return 2;}
  int mode=atoi(argv[1]); int procs=atoi(argv[2]); int n=100000;
  const char*sd="/dev/shm/kept_reader"; mkdir(sd,0755);
  for(int p=0;p<procs;p++) if(fork()==0){
    int dfd=open(sd,O_RDONLY|O_DIRECTORY); int lfd=open(sd,O_RDONLY|O_DIRECTORY);
    memset(rec,'x',sizeof rec); struct stat st; char a[64],cur[64]; int kf=-1;
    snprintf(cur,64,".tmp-%d-0",getpid());
    if(mode==3){ char sub[128]; snprintf(sub,128,"%s/.kept",sd); mkdir(sub,0755); int kd=open(sub,O_RDONLY|O_DIRECTORY); kf=openat(kd,cur,O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC,0644); } else if(mode>0) kf=openat(dfd,cur,O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC,0644);
    double t0=now();
    for(int i=0;i<n;i++){
      snprintf(a,64,".slave_lock-%d-%d",getpid(),i);
      fstatat(AT_FDCWD,sd,&st,AT_SYMLINK_NOFOLLOW);
      int f=-1;
      if(mode==0){
        f=openat(dfd,".",O_WRONLY|O_CLOEXEC|O_TMPFILE,0644);
        write(f,rec,sizeof rec);
        linkat(f,"",dfd,a,AT_EMPTY_PATH);
      } else if(mode==1){
        pwrite(kf,rec,sizeof rec,0);
        renameat2(dfd,cur,dfd,a,RENAME_NOREPLACE);
      } else {
        pwrite(kf,rec,sizeof rec,0);
        linkat(kf,"",dfd,a,AT_EMPTY_PATH);
      }
      lseek(lfd,0,SEEK_SET); syscall(SYS_getdents64,lfd,buf,sizeof buf); syscall(SYS_getdents64,lfd,buf,sizeof buf);
      if(mode==1){ snprintf(cur,64,".tmp-%d-%d",getpid(),i+1); renameat2(dfd,a,dfd,cur,RENAME_NOREPLACE); }
      else unlinkat(dfd,a,0);
      if(f>=0) close(f);
    }
    printf("mode %d, %d processes: %.3f us per read\n",mode,procs,(now()-t0)/n/1e3);
    if(mode==3){ char p[160]; snprintf(p,160,"%s/.kept/%s",sd,cur); unlink(p); } else if(mode>0) unlinkat(dfd,cur,0);
    exit(0);
  }
  while(wait(NULL)>0) {}
  { char sub[128]; snprintf(sub,128,"%s/.kept",sd); rmdir(sub); } rmdir(sd);
  return 0;
}
