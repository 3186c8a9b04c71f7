/* A FIFO hand-off with no lock at all: N processes pass one byte around a ring of pipes,
 * each blocked in read(2) until its predecessor writes. Not part of the build; a probe
 * behind docs/notes/contention.md section 10 ("Is FIFO itself what costs?").
 *   cc -O2 -o fifo_ring fifo_ring.c && for n in 2 4 8; do ./fifo_ring $n 2; done
 * Prints the passes per second of the whole ring over SECS seconds, and the voluntary
 * context switches per pass (getrusage of the children). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 8;
    double secs = argc > 2 ? atof(argv[2]) : 2;
    if (n < 2 || n > 256) { fprintf(stderr, "N: 2 to 256\n"); return 2; }
    int p[256][2], counts[2];
    if (pipe(counts)) { perror("pipe"); return 1; }
    for (int i = 0; i < n; i++) if (pipe(p[i])) { perror("pipe"); return 1; }
    double end = now() + secs;
    for (int i = 0; i < n; i++) {
        if (fork() == 0) {
            long k = 0; char b;
            while (read(p[i][0], &b, 1) == 1) {
                k++;
                if (b == 0 && now() >= end) b = 1;
                if (write(p[(i + 1) % n][1], &b, 1) != 1) break;
                if (b == 1) break;
            }
            if (write(counts[1], &k, sizeof k) != sizeof k) _exit(1);
            _exit(0);
        }
    }
    double t0 = now();
    char b = 0;
    if (write(p[0][1], &b, 1) != 1) { perror("write"); return 1; }
    long total = 0;
    for (int i = 0; i < n; i++) { long k; if (read(counts[0], &k, sizeof k) == sizeof k) total += k; }
    double wall = now() - t0;
    while (wait(NULL) > 0) {}
    struct rusage ru; getrusage(RUSAGE_CHILDREN, &ru);
    printf("N=%d passes/s %.0f  voluntary switches/pass %.2f\n", n, total / wall,
           (double)ru.ru_nvcsw / total);
    return 0;
}
