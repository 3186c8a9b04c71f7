/* The floor of issue #14's herd for any lock-file design: N reader processes wait on an
 * inotify watch of one file (as rwdir's readers wait for the queued writer's pending
 * file); the parent unlinks it; each reader then makes only the two steps no lock-file
 * reader can skip, R2 and R3: it links a file it wrote beforehand (O_TMPFILE, 233 bytes,
 * as rwdir's spare) into the directory under a name of its own, and lists the directory
 * (lseek + getdents64 until it returns 0). Not part of the build; a probe behind
 * docs/notes/contention.md section 11.
 *   cc -O2 -o herd_floor herd_floor.c && ./herd_floor /dev/shm 63 files 10
 * WAKE (sixth argument): see `touch` and `delself` in main.
 * MODE `files`: as above; `link`, `list`: one of the two steps alone; `wake`: the readers
 * only wake and stamp (no file step), the scheduler's share alone. Prints, per round, the first, median and last reader in after
 * the unlink, and the median of each over the rounds. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* Whether process `pid` is asleep (state S in /proc/PID/stat). */
static int asleep(pid_t pid) {
    char p[64], buf[256];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *c = strrchr(buf, ')');
    return c && c[1] == ' ' && c[2] == 'S';
}

/* What the readers watch: IN_ATTRIB too (raised by unlink, inside the directory's lock),
 * or IN_DELETE_SELF alone (raised when the last reference to the unlinked file goes). */
static int attrib = 1;
/* `defer`: IN_ATTRIB too, but a wake-up by IN_ATTRIB alone waits up to 2 ms more for
 * IN_DELETE_SELF before it goes on. */
static int defer = 0;

static void reader(int dirfd, const char *gate, int i, int files, int ready, int hold, double *stamp) {
    static char rec[233];
    memset(rec, 'x', sizeof rec);
    int tmp = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (tmp < 0 || write(tmp, rec, sizeof rec) != sizeof rec) { perror("tmpfile"); _exit(1); }
    int listfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    char path[4096];
    snprintf(path, sizeof path, "/proc/self/fd/%d/%s", dirfd, gate);
    if (listfd < 0 || in < 0 || inotify_add_watch(in, path, (attrib ? IN_ATTRIB : 0) | IN_DELETE_SELF) < 0) {
        perror("watch");
        _exit(1);
    }
    char c = 'r';
    if (write(ready, &c, 1) != 1) _exit(1);
    struct pollfd p = {.fd = in, .events = POLLIN};
    char ev[4096] __attribute__((aligned(8)));
    for (;;) {
        if (ppoll(&p, 1, NULL, NULL) == 1) break;
    }
    ssize_t got = read(in, ev, sizeof ev);
    if (got < 0) _exit(1);
    if (defer) {
        int self = 0;
        for (char *e = ev; e < ev + got; e += sizeof(struct inotify_event) + ((struct inotify_event *)e)->len)
            if (((struct inotify_event *)e)->mask & (IN_DELETE_SELF | IN_IGNORED)) self = 1;
        struct timespec two = {0, 2000000};
        if (!self && ppoll(&p, 1, &two, NULL) == 1 && read(in, ev, sizeof ev) < 0) _exit(1);
    }
    if (files & 1) {
        char name[64], link[64];
        snprintf(name, sizeof name, ".slave_lock-%d", i);
        /* As rwdir: linkat(fd, "", AT_EMPTY_PATH) where the kernel allows it, else
         * through /proc/self/fd. */
        if (linkat(tmp, "", dirfd, name, AT_EMPTY_PATH)) {
            snprintf(link, sizeof link, "/proc/self/fd/%d", tmp);
            if (linkat(AT_FDCWD, link, dirfd, name, AT_SYMLINK_FOLLOW)) { perror("linkat"); _exit(1); }
        }
    }
    if (files & 2) {
        char buf[32768];
        lseek(listfd, 0, SEEK_SET);
        while (syscall(SYS_getdents64, listfd, buf, sizeof buf) > 0) {}
    }
    *stamp = now();
    /* Wait, holding, until the parent has read every stamp: no reader wakes it (or
     * anyone) while the others go in. */
    if (read(hold, &c, 1) < 0) _exit(1);
    _exit(0);
}

int main(int argc, char **argv) {
    const char *base = argc > 1 ? argv[1] : "/dev/shm";
    int n = argc > 2 ? atoi(argv[2]) : 63;
    const char *mode = argc > 3 ? argv[3] : "files";
    int files = !strcmp(mode, "wake") ? 0 : !strcmp(mode, "link") ? 1 : !strcmp(mode, "list") ? 2 : 3;
    int rounds = argc > 4 ? atoi(argv[4]) : 10;
    /* WAKE `unlink` (default): the parent unlinks the watched file, as a lock-file
     * release does; `touch`: it only sets the file's times (futimens), which raises
     * IN_ATTRIB without taking the directory's lock. */
    int touch = argc > 5 && strcmp(argv[5], "touch") == 0;
    /* `delself`: the readers watch IN_DELETE_SELF alone, and the parent unlinks the file
     * while it holds it open, then closes it: the event comes with the close, after the
     * directory's lock was released. */
    int delself = argc > 5 && strcmp(argv[5], "delself") == 0;
    defer = argc > 5 && strcmp(argv[5], "defer") == 0;
    attrib = !delself;
    if (n < 1 || n > 1024 || rounds < 1) { fprintf(stderr, "N: 1 to 1024\n"); return 2; }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/herd_floor-%d", base, (int)getpid());
    if (mkdir(dir, 0755)) { perror(dir); return 1; }
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const char *gate = ".pending_lock-gate";
    double *first = calloc(rounds, sizeof *first), *mid = calloc(rounds, sizeof *mid),
           *last = calloc(rounds, sizeof *last);
    double *t = mmap(NULL, n * sizeof *t, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) { perror("mmap"); return 1; }
    pid_t *pids = calloc(n, sizeof *pids);
    for (int r = 0; r < rounds; r++) {
        int g = openat(dirfd, gate, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
        if (g < 0) { perror("gate"); return 1; }
        close(g);
        int ready[2], hold[2];
        if (pipe(ready) || pipe(hold)) { perror("pipe"); return 1; }
        for (int i = 0; i < n; i++) {
            pids[i] = fork();
            if (pids[i] == 0) {
                close(hold[1]);
                reader(dirfd, gate, i, files, ready[1], hold[0], &t[i]);
            }
        }
        for (int i = 0; i < n; i++) {
            char c;
            if (read(ready[0], &c, 1) != 1) { perror("ready"); return 1; }
        }
        for (int i = 0; i < n; i++)
            while (!asleep(pids[i])) usleep(1000);
        for (int i = 0; i < n; i++) t[i] = 0;
        double t0 = now();
        if (touch) {
            int g = openat(dirfd, gate, O_WRONLY | O_CLOEXEC);
            futimens(g, NULL);
            close(g);
        }
        int held = delself || defer ? openat(dirfd, gate, O_RDONLY | O_CLOEXEC) : -1;
        if (held >= 0) t0 = now();
        unlinkat(dirfd, gate, 0);
        if (held >= 0) close(held);
        /* Read the stamps only once the herd has had time to go in (as the benchmark
         * does, 500 ms after the release). */
        usleep(300 * 1000);
        close(hold[1]);
        for (int i = 0; i < n; i++) waitpid(pids[i], NULL, 0);
        qsort(t, n, sizeof *t, cmp);
        first[r] = (t[0] - t0) * 1e3, mid[r] = (t[n / 2] - t0) * 1e3, last[r] = (t[n - 1] - t0) * 1e3;
        printf("round %d: first %.3f ms, median %.3f ms, last %.3f ms\n", r + 1, first[r], mid[r], last[r]);
        for (int i = 0; i < n; i++) {
            char name[64];
            snprintf(name, sizeof name, ".slave_lock-%d", i);
            unlinkat(dirfd, name, 0);
        }
        close(ready[0]), close(ready[1]), close(hold[0]);
    }
    qsort(first, rounds, sizeof *first, cmp);
    qsort(mid, rounds, sizeof *mid, cmp);
    qsort(last, rounds, sizeof *last, cmp);
    printf("%d readers, %s, %d rounds: median first %.3f ms, median %.3f ms, last %.3f ms "
           "(last: min %.3f, max %.3f)\n",
           n, (const char *[]){"wake only", "link only", "listing only", "link + listing"}[files], rounds, first[rounds / 2], mid[rounds / 2],
           last[rounds / 2], last[0], last[rounds - 1]);
    rmdir(dir);
    return 0;
}
