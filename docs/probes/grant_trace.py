#!/usr/bin/env python3
"""Where a contended write grant's time goes, from a trace of docs/probes/grant_trace.sh.

Not part of the build; a probe behind docs/notes/contention.md section 23.
    python3 grant_trace.py TRACE [BLOCKING_SYSCALL]

A grant ends with its holder's release, which starts with an unlinkat (rwdir and
docs/probes/fifo_files.c alike: `.master_lock`, then the queue file). Consecutive
releases by one process are a process served twice in a row; by two processes, a
hand-off, which woke its successor or found it running. For the hand-offs that woke
it, the times (µs, medians, from the start of the release) at which the successor was
woken, ran, and started its own release, split by where the kernel woke it: on the
releasing process's CPU, or on the other one. Then how often the successor, once
running, left its CPU before its release, and for what; and, for each process, the
mean system calls from its release to its next block (BLOCKING_SYSCALL: 271, ppoll,
for rwdir; 0, read, for fifo_files.c), with the time between them (user space and
the tracer's own cost) and in them.
"""
import collections
import re
import statistics as st
import sys

NAMES = {0: 'read', 1: 'write', 3: 'close', 5: 'fstat', 7: 'poll', 8: 'lseek',
         17: 'pread64', 18: 'pwrite64', 39: 'getpid', 72: 'fcntl', 217: 'getdents64',
         254: 'inotify_add_watch', 255: 'inotify_rm_watch', 257: 'openat',
         262: 'newfstatat', 263: 'unlinkat', 265: 'linkat', 271: 'ppoll',
         280: 'utimensat', 316: 'renameat2'}
LINE = re.compile(r'^\s*(\S+)-(\d+)\s+\[(\d+)\].{7}\s*([\d.]+): (\w+): (.*)$')


def load(path):
    ev = []
    for line in open(path):
        m = LINE.match(line)
        if m:
            _, pid, cpu, ts, kind, rest = m.groups()
            nr = int(rest.split()[1]) if kind.startswith('sys_') else None
            ev.append((float(ts) * 1e6, int(pid), int(cpu), kind, rest, nr))
    return ev


def releases(ev):
    """Indexes of the sys_enter events that start a release: an unlinkat not right
    after another unlinkat of the same process (its last four calls)."""
    recent = collections.defaultdict(list)
    out = []
    for i, e in enumerate(ev):
        if e[3] != 'sys_enter':
            continue
        if e[5] == 263 and 263 not in recent[e[1]][-4:]:
            out.append(i)
        recent[e[1]].append(e[5])
    return out


def med(xs):
    return st.median(xs) if xs else float('nan')


def main():
    ev = load(sys.argv[1])
    block = int(sys.argv[2]) if len(sys.argv) > 2 else 271
    rel = releases(ev)
    same, awake, split = [], [], {'on its CPU': [], 'on the other CPU': []}
    away = collections.Counter()
    for a, b in zip(rel, rel[1:]):
        t0, holder, cpu = ev[a][0], ev[a][1], ev[a][2]
        nxt = ev[b][1]
        if nxt == holder:
            same.append(ev[b][0] - t0)
            continue
        woken = ran = None
        where = None
        for ts, pid, c, kind, rest, _ in ev[a:b]:
            if kind == 'sched_wakeup' and woken is None and f'pid={nxt} ' in rest:
                woken = ts - t0
                where = ('on its CPU' if f'target_cpu={cpu:03d}' in rest
                         else 'on the other CPU')
            elif kind == 'sched_switch' and woken is not None:
                if ran is None and f'next_pid={nxt} ' in rest:
                    ran = ts - t0
                elif ran is not None and f'prev_pid={nxt} ' in rest:
                    state = re.search(r'prev_state=(\S+)', rest).group(1)
                    to = re.search(r'next_comm=(\S+)', rest).group(1)
                    away[(state.rstrip('+'), re.split(r'[-/:]', to)[0])] += 1
        if woken is None or ran is None:
            awake.append(ev[b][0] - t0)
        else:
            split[where].append((woken, ran, ev[b][0] - t0))
    n = len(rel) - 1
    print(f'{n} grants in {ev[-1][0] - ev[0][0]:.0f} µs')
    print(f'  served twice in a row: {len(same)}, period {med(same):.0f} µs')
    print(f'  hand-offs to a running successor: {len(awake)}, period {med(awake):.0f} µs')
    for where, rows in split.items():
        if rows:
            w, r, e = (med([x[i] for x in rows]) for i in range(3))
            print(f'  hand-offs that woke it {where}: {len(rows)}: woken {w:.0f}, '
                  f'ran {r:.0f}, released {e:.0f} µs')
    woke = sum(len(r) for r in split.values())
    print('  the woken successor left its CPU before its release (state, for):')
    for (state, to), k in away.most_common(6):
        print(f'    {state} {to}: {k} ({100 * k / max(woke, 1):.1f} % of those grants)')
    # The releaser's calls from its release to its next block, by the commonest shape.
    per = collections.defaultdict(list)
    for e in ev:
        if e[3] in ('sys_enter', 'sys_exit'):
            per[e[1]].append(e)
    shapes = collections.defaultdict(list)
    starts = set(rel)
    index = {id(e): i for i, e in enumerate(ev)}
    for es in per.values():
        j = 0
        while j + 1 < len(es):
            if index[id(es[j])] not in starts:
                j += 1
                continue
            seq, prev = [], es[j][0]
            while j + 1 < len(es) and es[j][3] == 'sys_enter' and es[j + 1][3] == 'sys_exit':
                en, ex = es[j], es[j + 1]
                seq.append((NAMES.get(en[5], str(en[5])), en[0] - prev, ex[0] - en[0]))
                prev = ex[0]
                j += 2
                if (en[5] == block and ex[0] - en[0] > 30) or len(seq) > 60:
                    break
            shapes[tuple(s[0] for s in seq)].append(seq)
    if shapes:
        shape, seqs = max(shapes.items(), key=lambda kv: len(kv[1]))
        print(f'the releaser, release to next block ({len(seqs)} of '
              f'{sum(len(v) for v in shapes.values())}; means, µs):')
        total = 0.0
        for i, name in enumerate(shape[:-1]):
            gap = st.mean(s[i][1] for s in seqs)
            took = st.mean(s[i][2] for s in seqs)
            total += gap + took
            print(f'  {name:18} before {gap:4.1f}  in {took:5.1f}  sum {total:5.1f}')


if __name__ == '__main__':
    main()
