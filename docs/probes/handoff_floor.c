/* The floor of a lock-file hand-off: the system calls rwdir makes between a release and
 * the waiter's return, in C, with nothing else around them. Not part of the build; a
 * probe behind docs/notes/handoff.md ("The floor: the same calls from C").
 *   cc -O2 -o handoff_floor handoff_floor.c && ./handoff_floor MODE
 * Prints the median and p90 of t' - t in microseconds over 300 hand-offs, and the median
 * time the release itself took (flock: the close; else fstatat + unlink), where t is taken
 * by the holder right before its release and t' by the waiter (another process) when its
 * last step returns. The holder sleeps 2-12 ms before each release. Uses /dev/shm/probe.
 * MODE 0: flock(2). The waiter blocks in flock(LOCK_SH); the release is the holder's close.
 * MODE 1: the wake-up alone. The holder makes rwdir's release of `.master_lock` (fstatat,
 *         then unlink, its descriptor closed after); the waiter blocks in ppoll (1 s
 *         timeout) on an inotify watch for removals and reads the event.
 * MODE 2: a reader's hand-off (X -> S): MODE 1, then linkat of an O_TMPFILE written
 *         while waiting, and a listing (getdents64 until it returns 0).
 * MODE 3: a writer's hand-off (X -> X): MODE 1, then linkat, unlinkat of the pending
 *         file (made by the waiter before it waits and held open until after the
 *         hand-off, as rwdir does), renameat2(RENAME_NOREPLACE) of the token, and the
 *         listing.
 * MODE 4: MODE 2, but the waiter watches IN_CLOSE_WRITE instead of removals, so that it is
 *         woken by the holder's close after the unlink (outside the directory's lock),
 *         not from inside the unlink.
 * MODE 5: MODE 2, but the waiter watches the file itself (IN_DELETE_SELF | IN_MOVE_SELF),
 *         made before each wait, and the holder closes its descriptor before the unlink:
 *         the inode, and the watch with it, go inside the unlink.
 * MODE 6: MODE 2, the waiter watching the file for IN_ATTRIB (which the unlink raises),
 *         the holder closing after the unlink: rwdir's writer waiting for .master_lock
 *         until 2026-12-05 (the watch goes at the holder's close).
 * MODE 7: MODE 2, the waiter watching the file for IN_DELETE_SELF, the holder closing
 *         after the unlink: rwdir's reader waiting for .master_lock until 2026-12-05
 *         (woken at the close).
 * MODE 8: MODE 2 (the directory's watch), the holder closing before the unlink: the
 *         inode goes inside the unlink as in MODE 5, with no watch on it.
 * The line also gives "wake": the median time from t to the waiter's return from ppoll.
 * PIN=1 runs the holder on CPU 0 and the waiter on CPU 1. BATCH=1 makes the waiter
 * SCHED_BATCH, so that its wake-up does not preempt the holder. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sched.h>

#define D "/dev/shm/probe"
#define N 300
static uint64_t now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
static int cmp(const void *a, const void *b) { uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b; return x < y ? -1 : x > y; }
static void pin(int cpu) {
  if (!getenv("PIN")) return;
  cpu_set_t c; CPU_ZERO(&c); CPU_SET(cpu, &c); sched_setaffinity(0, sizeof c, &c);
}
static void mk(const char *n) { int fd = open(n, O_CREAT | O_WRONLY | O_TRUNC, 0644); if (write(fd, "x", 1) < 0) _exit(1); close(fd); }

int main(int argc, char **argv) {
  int mode = argc > 1 ? atoi(argv[1]) : 0;
  int ready[2], result[2], go[2];
  if (pipe(ready) || pipe(result) || pipe(go)) return 1;
  if (system("rm -rf " D "; mkdir -p " D) != 0 || chdir(D) != 0) return 1;
  pid_t w = fork();
  if (w == 0) {
    pin(1);
    if (getenv("BATCH")) { struct sched_param sp0 = {0}; sched_setscheduler(0, SCHED_BATCH, &sp0); }
    int dfd = open(D, O_RDONLY | O_DIRECTORY);
    int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    int on_file = mode >= 5 && mode <= 7;
    if (!on_file) inotify_add_watch(in, D, mode == 4 ? IN_CLOSE_WRITE : IN_DELETE | IN_MOVED_FROM);
    char ev[4096], db[32768], c = 1;
    for (int i = 0; i < N; i++) {
      uint64_t t1, tw = 0; char g;
      if (read(go[0], &g, 1) != 1) _exit(1);
      if (mode == 0) {
        int fd = open("f", O_RDONLY);
        if (write(ready[1], &c, 1) != 1) _exit(1);
        flock(fd, LOCK_SH); t1 = now(); flock(fd, LOCK_UN); close(fd);
      } else {
        int sp = openat(dfd, ".", O_TMPFILE | O_WRONLY, 0644), pend = -1;
        if (pwrite(sp, "rwdir-holder 1\nkind write\n", 26, 0) < 0) _exit(1);
        if (mode == 3) { /* our queue file, as rwdir makes it and keeps it open */
          pend = openat(dfd, ".", O_TMPFILE | O_WRONLY, 0644);
          if (pwrite(pend, "rwdir-holder 1\nkind pending\n", 28, 0) < 0) _exit(1);
          linkat(pend, "", dfd, "pending", AT_EMPTY_PATH);
        }
        lseek(dfd, 0, SEEK_SET);
        while (read(in, ev, sizeof ev) > 0) {}
        if (on_file) inotify_add_watch(in, D "/master", (mode == 6 ? IN_ATTRIB : IN_DELETE_SELF | IN_MOVE_SELF) | IN_DONT_FOLLOW);
        if (write(ready[1], &c, 1) != 1) _exit(1);
        struct pollfd p = {in, POLLIN, 0};
        struct timespec to = {1, 0};
        ppoll(&p, 1, &to, NULL);
        tw = now();
        if (read(in, ev, sizeof ev) < 0) _exit(1);
        if (mode >= 2) linkat(sp, "", dfd, "grant", AT_EMPTY_PATH);
        if (mode == 3) {
          unlinkat(dfd, "pending", 0);
          syscall(SYS_renameat2, dfd, "token-1", dfd, "token-2", 1);
        }
        if (mode >= 2) while (syscall(SYS_getdents64, dfd, db, sizeof db) > 0) {}
        t1 = now();
        close(sp);
        if (pend >= 0) close(pend);
      }
      if (write(result[1], &t1, 8) != 8 || write(result[1], &tw, 8) != 8) _exit(1);
    }
    _exit(0);
  }
  uint64_t d[N], rel[N], wk[N];
  pin(0);
  srand(1);
  for (int i = 0; i < N; i++) {
    int hfd;
    if (mode == 0) { mk("f"); hfd = open("f", O_RDONLY); flock(hfd, LOCK_EX); }
    else { unlink("grant"); unlink("token-2"); mk("master"); mk("token-1"); hfd = open("master", O_WRONLY); }
    char c = 1;
    if (write(go[1], &c, 1) != 1 || read(ready[0], &c, 1) != 1) return 1;
    struct timespec s = {0, 2000000 + rand() % 10000000};
    nanosleep(&s, NULL);
    uint64_t t0 = now(), t1;
    if (mode == 0) close(hfd);
    else {
      if (mode == 5 || mode == 8) close(hfd);
      struct stat st; fstatat(AT_FDCWD, "master", &st, AT_SYMLINK_NOFOLLOW); unlink("master");
    }
    rel[i] = now() - t0;
    if (mode != 0 && mode != 5 && mode != 8) close(hfd);
    uint64_t tw;
    if (read(result[0], &t1, 8) != 8 || read(result[0], &tw, 8) != 8) return 1;
    wk[i] = tw - t0;
    d[i] = t1 - t0;
  }
  waitpid(w, NULL, 0);
  qsort(d, N, 8, cmp);
  qsort(rel, N, 8, cmp);
  qsort(wk, N, 8, cmp);
  printf("mode %d median %.1f p90 %.1f release %.1f", mode, d[N / 2] / 1000.0, d[N * 9 / 10] / 1000.0, rel[N / 2] / 1000.0);
  if (mode != 0) printf(" wake %.1f", wk[N / 2] / 1000.0);
  printf("\n");
  return 0;
}
