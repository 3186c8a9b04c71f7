/* The floor of a first-come-first-served writer queue made of lock files, with nothing
 * else: N processes loop "queue, wait for the predecessor, take the gate, look for
 * readers, hold, leave", the fixed shape of rwdir's write lock with every check that
 * only matters after a crash taken out. Not part of the build; a probe behind
 * docs/notes/contention.md section 12 ("The shape's own floor").
 *   cc -O2 -o fifo_files fifo_files.c && for n in 2 4 8; do ./fifo_files /dev/shm/ff $n 2; done
 * Per grant, as rwdir's contended write:
 *   queue: open(O_CREAT|O_EXCL) a pending file named by CLOCK_REALTIME ns (sorted by
 *          name), write a 200-byte record, list the directory (getdents64 until 0) to
 *          find the youngest pending file older than ours;
 *   wait:  if there is one, an inotify watch of it (IN_ATTRIB, as rwdir's writers; QUIET=1
 *          for IN_DELETE_SELF), fstatat to see it is still there, then block in read(2).
 *          Woken by its removal it is our turn (no crashes here), as V9 assumes;
 *   gate:  open(O_CREAT|O_EXCL) `.master_lock` (EEXIST: watch it and wait likewise);
 *   drain: one listing made after the gate exists (no reader here);
 *   hold:  check and bump a counter in shared memory (exclusion is checked, and fails
 *          the run);
 *   leave: unlink `.master_lock`, then the pending file, then close both.
 * rwdir also renames a fencing token, lists once more before the gate, and checks its
 * `.master_lock` with fstatat; this probe does none of it. TOKEN=1 adds the token's
 * renameat2 (RENAME_NOREPLACE) after the gate; LOOK=1 rwdir's listing after the wake-up
 * (W2's look before the gate); JUDGE=1 rwdir's judgement of the predecessor (open,
 * fstat, read of its record, close); LINK=1 creates each file as rwdir does, an O_TMPFILE
 * written ahead and then linkat(AT_EMPTY_PATH) (needs CAP_DAC_READ_SEARCH, e.g. root).
 * REST=63 adds every other call strace shows in rwdir's contended write (contention.md
 * section 28), as a sum of bits: 1 the checks of the state directory's place (fstatat of
 * its path at the acquisition, of its name in the parent at the grant and after the
 * release), 2 the spare's fstat, 4 the look at the predecessor's name before its watch,
 * 8 the wait as ppoll (1 ms timeout) then read, 16 W6's and the release's fstatat of
 * `.master_lock`, 32 the bench's counter kept in a file (pread + pwrite), 64 (with 8)
 * the ppoll without a timeout (section 28: the same as rwdir's 5 ms and longer). Give DIR as
 * a directory inside another (e.g. /dev/shm/ff/sub): bit 1 looks its name up there.
 * SPIN=us makes a waiter spin instead of sleeping once its predecessor holds (YIELD=1:
 * sched_yield between its looks; contention.md section 29).
 * GATELINK=1 makes the gate without a new inode: `.master_lock` is a second name of the
 * writer's own pending file, linkat(pending fd, "", AT_EMPTY_PATH), so a contended grant
 * creates one inode instead of two (contention.md section 30). Its waiters then see the
 * gate's unlink as an IN_ATTRIB of the pending file they watch; QUIET=1 spares them it.
 * Prints grants per second over SECS seconds, and voluntary context switches and CPU
 * (user + system) per grant, summed over the children (getrusage). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared { volatile int inside; volatile long grants; volatile int stop; volatile int bad; };

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static uint64_t real_ns(void) { struct timespec t; clock_gettime(CLOCK_REALTIME, &t); return (uint64_t)t.tv_sec * 1000000000u + t.tv_nsec; }

/* Lists dfd to the end; returns the youngest pending name older than `mine` in `pred`
 * (empty if none). */
static char pred2[256]; /* after list(): the youngest pending name older than `pred` */

static void list(int dfd, const char *mine, char *pred) {
    char buf[32768];
    pred[0] = 0;
    pred2[0] = 0;
    lseek(dfd, 0, SEEK_SET);
    for (;;) {
        long n = syscall(SYS_getdents64, dfd, buf, sizeof buf);
        if (n <= 0) break;
        for (long off = 0; off < n;) {
            struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *d = (void *)(buf + off);
            if (mine && strncmp(d->name, ".p-", 3) == 0 && strcmp(d->name, mine) < 0) {
                if (strcmp(d->name, pred) > 0) {
                    strcpy(pred2, pred);
                    strcpy(pred, d->name);
                } else if (strcmp(d->name, pred2) > 0) {
                    strcpy(pred2, d->name);
                }
            }
            off += d->reclen;
        }
    }
}

static int rest; /* REST: the bits above */

/* Waits until `name` in dfd is removed. The watch is made again after each wake-up:
 * `.master_lock` is one name for many inodes, and a wake-up can find the next one
 * already made (the watch of the one removed is then gone). */
static void wait_gone(int ino, int dfd, const char *dir, const char *name, uint32_t mask) {
    char path[512], ev[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    int wd = -1;
    for (;;) {
        /* The same wd while the name is the same inode; the watch of a removed inode
         * goes by itself (IN_IGNORED, read as a spurious wake-up). */
        if ((rest & 4) && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
        wd = inotify_add_watch(ino, path, mask);
        if (wd < 0) return; /* already gone */
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) break;
        if (rest & 8) {
            struct pollfd p = { .fd = ino, .events = POLLIN };
            struct timespec ms = { 0, 1000000 };
            while (ppoll(&p, 1, (rest & 64) ? NULL : &ms, NULL) == 0) {}
        }
        if (read(ino, ev, sizeof ev) <= 0) break;
    }
    inotify_rm_watch(ino, wd);
    /* Drain what the removal queued (IN_IGNORED and the like) without blocking. */
    int fl = fcntl(ino, F_GETFL);
    fcntl(ino, F_SETFL, fl | O_NONBLOCK);
    while (read(ino, ev, sizeof ev) > 0) {}
    fcntl(ino, F_SETFL, fl);
}

/* SPIN=us: a waiter is awake when its predecessor leaves. It sleeps until the writer
 * two ahead of it (`pred2`) is gone, which is when its predecessor takes the gate, and
 * then looks (fstatat) at its predecessor's name in a loop, for at most `spin` µs
 * (YIELD=1: sched_yield between looks), before it sleeps on it as without SPIN. With no
 * writer two ahead (second in line) it spins at once. */
static int spin_us, spin_yield;

static void wait_spin(int ino, int dfd, const char *dir, const char *pred, const char *pp, uint32_t mask) {
    struct stat st;
    if (pp[0]) wait_gone(ino, dfd, dir, pp, mask);
    double until = now() + spin_us / 1e6;
    while (now() < until) {
        if (fstatat(dfd, pred, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
        if (spin_yield) sched_yield();
    }
    wait_gone(ino, dfd, dir, pred, mask);
}

/* Creates `name` in dfd with a 200-byte record: open(O_CREAT|O_EXCL) and write, or with
 * LINK=1 as rwdir does, an O_TMPFILE written beforehand and then linkat(AT_EMPTY_PATH).
 * Returns the descriptor, -1 with errno EEXIST if the name is taken. */
static int create(int dfd, const char *name, const char *record, int link) {
    if (!link) {
        int fd = openat(dfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
        if (fd >= 0 && write(fd, record, 200) != 200) { close(fd); errno = EIO; return -1; }
        return fd;
    }
    static int spare = -1;
    if (spare < 0) {
        spare = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
        struct stat st;
        if ((rest & 2) && spare >= 0 && name[1] == 'm') fstat(spare, &st);
        if (spare < 0 || pwrite(spare, record, 200, 0) != 200) { errno = EIO; return -1; }
    }
    if (linkat(spare, "", dfd, name, AT_EMPTY_PATH) != 0) return -1;
    int fd = spare;
    spare = -1;
    return fd;
}

/* GATELINK=1: `.master_lock` as a second name of our pending file's inode; returns a
 * descriptor of it, -1 with errno EEXIST if the name is taken. */
static int gatelink;

static int gate_link(int pfd, int dfd) {
    if (linkat(pfd, "", dfd, ".master_lock", AT_EMPTY_PATH) != 0) return -1;
    return dup(pfd);
}

static void child(const char *dir, struct shared *sh, uint32_t mask, int token, int look, int judge, int link) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    int ino = inotify_init1(IN_CLOEXEC);
    char d1[512], d2[512];
    snprintf(d1, sizeof d1, "%s", dir);
    snprintf(d2, sizeof d2, "%s", dir);
    int parent = open(dirname(d1), O_RDONLY | O_DIRECTORY);
    const char *base = basename(d2);
    int counter = openat(dfd, "counter", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    long value = 0;
    char record[200];
    memset(record, 'r', sizeof record);
    char mine[64], pred[256];
    while (!sh->stop) {
        if (rest & 1) fstatat(AT_FDCWD, dir, &st, AT_SYMLINK_NOFOLLOW);
        snprintf(mine, sizeof mine, ".p-%020llu-%08d", (unsigned long long)real_ns(), getpid());
        int pfd = create(dfd, mine, record, link);
        if (pfd < 0) { perror("pending"); sh->bad = 1; return; }
        list(dfd, mine, pred);
        if (pred[0] && judge) {
            /* rwdir's judgement of the predecessor: open, fstat, read its record, close. */
            char rec[512];
            struct stat st;
            int j = openat(dfd, pred, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (j >= 0) { fstat(j, &st); if (read(j, rec, sizeof rec) < 0) sh->bad = 1; close(j); }
        }
        if (pred[0]) {
            if (spin_us) {
                char pp[256];
                strcpy(pp, pred2);
                wait_spin(ino, dfd, dir, pred, pp, mask);
            } else {
                wait_gone(ino, dfd, dir, pred, mask);
            }
            if (look) { char again[256]; list(dfd, mine, again); } /* rwdir's W2 look after the wake-up */
        }
        int mfd;
        while ((mfd = gatelink ? gate_link(pfd, dfd) : create(dfd, ".master_lock", record, link)) < 0) {
            if (errno != EEXIST) { perror("master"); sh->bad = 1; return; }
            wait_gone(ino, dfd, dir, ".master_lock", mask);
        }
        if (token) {
            /* The token's rename, n -> n+1 (the number is the grant count). */
            char from[64], to[64];
            long g = sh->grants;
            snprintf(from, sizeof from, ".t-%020ld", g);
            snprintf(to, sizeof to, ".t-%020ld", g + 1);
            if (g == 0 || syscall(SYS_renameat2, dfd, from, dfd, to, 1 /* RENAME_NOREPLACE */) != 0) {
                int t = openat(dfd, to, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
                if (t >= 0) close(t);
            }
        }
        list(dfd, NULL, pred); /* the drain's look: no reader here */
        if (rest & 16) fstatat(dfd, ".master_lock", &st, AT_SYMLINK_NOFOLLOW);
        if (rest & 1) fstatat(parent, base, &st, AT_SYMLINK_NOFOLLOW);
        if (__atomic_exchange_n(&sh->inside, 1, __ATOMIC_SEQ_CST) != 0) sh->bad = 2;
        sh->grants++;
        if ((rest & 32) && (pread(counter, &value, sizeof value, 0) < 0 || (value++, pwrite(counter, &value, sizeof value, 0)) < 0)) sh->bad = 1;
        __atomic_store_n(&sh->inside, 0, __ATOMIC_SEQ_CST);
        if (rest & 16) fstatat(dfd, ".master_lock", &st, AT_SYMLINK_NOFOLLOW);
        unlinkat(dfd, ".master_lock", 0);
        unlinkat(dfd, mine, 0);
        close(mfd);
        close(pfd);
        if (rest & 1) fstatat(parent, base, &st, AT_SYMLINK_NOFOLLOW);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: fifo_files DIR [N [SECS]]\n"); return 2; }
    const char *dir = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 8;
    double secs = argc > 3 ? atof(argv[3]) : 2;
    uint32_t mask = getenv("QUIET") && atoi(getenv("QUIET")) ? IN_DELETE_SELF | IN_MOVE_SELF : IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;
    int token = getenv("TOKEN") && atoi(getenv("TOKEN"));
    int look = getenv("LOOK") && atoi(getenv("LOOK"));
    int judge = getenv("JUDGE") && atoi(getenv("JUDGE"));
    int link = getenv("LINK") && atoi(getenv("LINK"));
    rest = getenv("REST") ? atoi(getenv("REST")) : 0;
    gatelink = getenv("GATELINK") && atoi(getenv("GATELINK"));
    spin_us = getenv("SPIN") ? atoi(getenv("SPIN")) : 0;
    spin_yield = getenv("YIELD") && atoi(getenv("YIELD"));
    mkdir(dir, 0755);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -f %s/.p-* %s/.t-* %s/.master_lock %s/counter", dir, dir, dir, dir);
    if (system(cmd) != 0) return 1;
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < n; i++) if (fork() == 0) { child(dir, sh, mask, token, look, judge, link); _exit(0); }
    double t0 = now();
    usleep((useconds_t)(secs * 1e6));
    long g = sh->grants;
    double t1 = now();
    sh->stop = 1;
    for (int i = 0; i < n; i++) wait(NULL);
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    long all = sh->grants;
    printf("N=%d: %.0f grants/s, %.2f voluntary switches and %.0f us CPU per grant%s%s%s%s%s%s%s%s\n", n, g / (t1 - t0),
           (double)ru.ru_nvcsw / all, cpu * 1e6 / all, sh->bad ? ", EXCLUSION OR I/O FAILED" : "", token ? " +token" : "", look ? " +look" : "", judge ? " +judge" : "", link ? " +link" : "", rest ? " +rest" : "", spin_us ? " +spin" : "", gatelink ? " +gatelink" : "");
    system(cmd);
    return sh->bad ? 1 : 0;
}
