#!/usr/bin/env python3
"""Generate a Promela model of the rwdir lock-file protocols for Spin.

Every file-system operation (create / unlink / rename / link / a listdir
snapshot / a read of one file) is one atomic step.  Processes are unrolled
(one proctype per process) so that every guard is a constant expression.

Processes: writers W0..W{NW-1} (Spin pids 0..NW-1), readers R0..R{NR-1}
(pids NW..NW+NR-1), and a Chaos process that may crash any non-idle process
at any step (its files stay behind; it restarts as a new incarnation, i.e. a
new pid/start time).  A file's content is its owner's code
    o = pid*NINC + incarnation + 1,
and an owner is alive iff it is the current incarnation of its process.

Options (see --help): --proto orig|fixed, --break none|naive|tomb|excl,
--lease, --skew, --giveup, --scan 0|1|2, --crash N, property switches.
"""
import argparse
import sys


def build(a):
    NW, NR, CRASH = a.nw, a.nr, a.crash
    NINC = CRASH + 1
    NP = NW + NR
    NQ = max(NW * NINC, 1)
    NSL = max(NR * NINC, 1)
    NBK = NP * NINC
    fixed = a.proto == "fixed"
    brk = a.brk
    out = []
    w = out.append

    # ---------------------------------------------------------------- helpers
    def own(p):
        return str(p + 1) if NINC == 1 else f"({p * NINC} + inc[{p}] + 1)"

    def proc_of(e):
        return f"(({e}) - 1)" if NINC == 1 else f"((({e}) - 1) / {NINC})"

    def alive(e):
        return "1" if NINC == 1 else f"(inc[(({e}) - 1) / {NINC}] == (({e}) - 1) % {NINC})"

    def deadj(e, me):
        """Judgement 'owner of content e is dead' made by process me."""
        if a.lease:  # a lease may expire while the owner is merely slow
            return f"({proc_of(e)} != {me})"
        return "0" if NINC == 1 else f"(inc[(({e}) - 1) / {NINC}] != (({e}) - 1) % {NINC})"

    def slot_alive(p, c):  # slot of process p, incarnation c
        return "1" if NINC == 1 else f"(inc[{p}] == {c})"

    def slot_deadj(p, c, me):
        if a.lease:
            return "1" if p != me else "0"
        return "0" if NINC == 1 else f"(inc[{p}] != {c})"

    def idx(p, base=0):  # index of process p's current-incarnation slot
        return str(p - base) if NINC == 1 else f"({(p - base) * NINC} + inc[{p}])"

    def name(p):
        return f"W{p}" if p < NW else f"R{p - NW}"

    def P(me, fmt, *args):
        args_s = "".join(", " + x for x in args)
        return f'printf("@ P%d.%d | {fmt}\\n", {me}, inc[{me}]{args_s})'

    def bitclear_all(p):
        """p (a writer) entered / crashed / gave up: nobody waits for it any more."""
        s = []
        if a.prio:
            for r in range(NR):
                s.append(f"owe[{r}] = owe[{r}] & {0xff & ~(1 << p)}")
        if a.fifo:
            for q in range(NW):
                s.append(f"ahead[{q}] = ahead[{q}] & {0xff & ~(1 << p)}")
        return "; ".join(s) if s else "skip"

    def live_writer_mask(exclude=None):
        """writers whose (live, current) pending file exists or that hold the master and are not yet in."""
        terms = []
        for q in range(NW):
            if q == exclude:
                continue
            inq = " || ".join(f"Q[{j}] == {own(q)}" for j in range(NQ))
            if fixed:
                hold = f"(M == {own(q)} && st[{q}] == TRY)"
            else:
                hold = f"(MO[{idx(q)}] && st[{q}] == TRY)"
            terms.append(f"(({inq}) || {hold} -> {1 << q} : 0)")
        return " | ".join(terms) if terms else "0"

    dead_q = lambda me: " || ".join(f"(Q[{j}] != 0 && {deadj(f'Q[{j}]', me)})" for j in range(NQ))

    def s_owner(k):
        return NW + k // NINC, k % NINC

    def bk_owner(k):
        return k // NINC, k % NINC

    dead_s = lambda me: " || ".join(
        f"(S[{k}] && {slot_deadj(*s_owner(k), me)})" for k in range(NR * NINC)) or "0"

    def gc_s(me):
        s = []
        for k in range(NR * NINC):
            s.append(f"if :: S[{k}] && {slot_deadj(*s_owner(k), me)} -> S[{k}] = 0; nS--; "
                     + P(me, f"unlink .slave_lock of P{s_owner(k)[0]}.{s_owner(k)[1]} (owner judged dead)") + " :: else fi")
        return "; ".join(s)

    def bk_other(k, me):
        p, c = bk_owner(k)
        if p == me:
            return "0" if NINC == 1 else f"(BK[{k}] && inc[{me}] != {c})"
        return f"BK[{k}]"

    def other_bk_any(me):
        return " || ".join(bk_other(k, me) for k in range(NBK))

    def other_bk_dead(me):
        t = []
        for k in range(NBK):
            p, c = bk_owner(k)
            if p == me:
                if NINC > 1:
                    t.append(f"(BK[{k}] && inc[{me}] != {c})")  # my own earlier (dead) incarnation
            else:
                t.append(f"(BK[{k}] && {slot_deadj(p, c, me)})")
        return " || ".join(t) or "0"

    def other_bk_live(me, higher_only=False):
        t = []
        for k in range(NBK):
            p, c = bk_owner(k)
            if p == me or (higher_only and p > me):
                continue
            t.append(f"(BK[{k}] && {slot_alive(p, c)})")
        return " || ".join(t) or "0"

    def gc_bk(me):
        s = []
        for k in range(NBK):
            p, c = bk_owner(k)
            if p == me:
                if NINC == 1:
                    continue
                cond = f"BK[{k}] && inc[{me}] != {c}"
            else:
                cond = f"BK[{k}] && {slot_deadj(p, c, me)}"
            s.append(f"if :: {cond} -> BK[{k}] = 0; " + P(me, f"unlink .break marker of P{p}.{c} (owner judged dead)") + " :: else fi")
        return "; ".join(s) or "skip"

    # --------------------------------------------------------------- globals
    shown = [x for i, x in enumerate(sys.argv[1:]) if x not in ("-o", "--out") and sys.argv[i] not in ("-o", "--out")]
    w(f"/* generated by: python3 gen_model.py {' '.join(shown)} */")
    w(f"/* NW={NW} NR={NR} CRASH={CRASH} proto={a.proto} break={brk} lease={int(a.lease)} "
      f"skew={int(a.skew)} giveup={int(a.giveup)} scan={a.scan} */")
    if a.v1 != "off" or a.v2 or a.tokens:
        w(f"/* variants: v1={a.v1} v2={int(a.v2)} tokens={a.tokens} v3={int(a.v3)} */")
    if a.v4 or a.tok_lost:
        w(f"/* V4: v4={int(a.v4)} mixed={int(a.v4_mixed)} mutant={a.v4_mutant} probe={a.v4_probe} tok_lost={int(a.tok_lost)} */")
    w("#define IDLE 0\n#define TRY 1\n#define CS 2")
    w(f"byte inc[{NP}];          /* current incarnation of each process */")
    w(f"byte st[{NP}];           /* IDLE / TRY / CS, for properties */")
    w(f"bit  crashreq[{NP}];")
    w("byte ncrash;")
    w("/* ---- the lock directory ---- */")
    if fixed:
        w("byte M;                 /* .master_lock: 0 = absent, else owner code */")
    else:
        w(f"bit  MO[{NW * NINC}];        /* original: .master_lock-<uuid> per writer incarnation */")
    w(f"byte Q[{NQ}];            /* .pending_lock-<uuid>-<ns> files sorted by (ns,uuid); 0 = none */")
    w(f"bit  S[{NSL}];            /* .slave_lock-<uuid> per reader incarnation */")
    w("byte nS;                /* number of .slave_lock files (derived) */")
    if fixed and brk == "excl":
        w(f"bit  BK[{NBK}];           /* .break-<ns>-<uuid> markers */")
    w("/* ---- monitors ---- */")
    w("byte nrcs, nwcs;        /* readers / writers inside */")
    w(f"byte owe[{max(NR, 1)}];           /* per reader: writers it must not overtake */")
    w(f"byte ahead[{max(NW, 1)}];         /* per writer: writers queued before it */")
    w("byte hj, hk, hpos;      /* scratch, always 0 between steps */")
    K = a.tokens
    if fixed and K:
        w(f"bit  T[{K + 1}];            /* .token-<k>, k = 1..{K} */")
        w("byte gmax;              /* monitor: highest token granted (passed T3) so far */")

    # queue inlines
    w(f"""
inline qinsert(o) {{
  hj = 0;
  do :: hj < {NQ} && Q[hj] != 0 -> hj++ :: else -> break od;   /* hj = queue length */
  hpos = hj;""")
    if a.skew:
        w("  do :: hpos > 0 -> hpos-- :: true -> break od;   /* ns taken earlier / clock skew: any position */")
    w(f"""  do :: hj > hpos -> Q[hj] = Q[hj-1]; hj-- :: else -> break od;
  Q[hpos] = o
}}
inline qremove(o) {{
  hj = 0;
  do :: hj < {NQ} && Q[hj] != o -> hj++ :: else -> break od;
  if
  :: hj < {NQ} ->
     do :: hj < {NQ - 1} -> Q[hj] = Q[hj+1]; hj++ :: else -> break od;
     Q[{NQ - 1}] = 0
  :: else -> skip
  fi;
  hj = 0
}}""")

    def gcq(me):
        return (f"hj = 0; hk = 0; "
                f"do :: hj < {NQ} -> if :: Q[hj] != 0 && !{deadj('Q[hj]', me)} -> Q[hk] = Q[hj]; hk++ :: else fi; hj++ "
                f":: else -> break od; "
                f"do :: hk < {NQ} -> Q[hk] = 0; hk++ :: else -> break od; hj = 0; hk = 0; "
                + P(me, "unlink pending file(s) whose owner is judged dead"))

    # ----------------------------------------------------------- master break
    def break_master(me, L):
        """Code executed after a listdir showed .master_lock with a dead owner."""
        s = []
        if brk == "naive":
            s.append(f"d_step {{ M = 0; victim = 0; " + P(me, "unlink .master_lock") + " }")
        elif brk == "tomb":
            s.append("d_step { tomb = M; M = 0; " + P(me, "rename .master_lock -> .tomb-<my uuid> (content P%d.%d)",
                                                      proc_of("tomb"), f"(tomb - 1) % {NINC}" if NINC > 1 else "0") + " }")
            s.append("if")
            s.append("  :: d_step { tomb == 0 -> victim = 0 }")
            s.append("  :: d_step { tomb != 0 && tomb == victim -> tomb = 0; victim = 0; "
                     + P(me, "tombstone holds the dead owner: unlink it") + " }")
            s.append("  :: d_step { tomb != 0 && tomb != victim -> "
                     + P(me, "tombstone holds a LIVE owner's file: restore it") + " };")
            s.append("     d_step { if :: M == 0 -> M = tomb; " + P(me, "link tombstone -> .master_lock: ok")
                     + " :: else -> " + P(me, "link tombstone -> .master_lock: EEXIST, cannot restore")
                     + " fi; tomb = 0; victim = 0 }")
            s.append("fi")
        elif brk == "excl":
            my = f"BK[{idx(me)}]"
            s.append(f"do   /* B0: wait until no other live break marker */")
            s.append(f"  :: d_step {{ !({other_bk_live(me)}) -> skip }}; break")
            s.append(f"  :: d_step {{ {other_bk_dead(me)} -> {gc_bk(me)} }}")
            s.append(f"  :: d_step {{ M == 0 || !{deadj('M', me)} -> " + P(me, "master gone or alive: stop breaking") + f" }}; goto {L}_done")
            s.append("od;")
            s.append(f"skip; d_step {{ {my} = 1; " + P(me, "create .break marker") + " };")
            s.append(f"{L}_b2:")
            if a.scan:
                # non-atomic readdir: one entry at a time
                for k in range(NBK):
                    o = bk_other(k, me)
                    if o == "0":
                        continue
                    s.append(f"if :: d_step {{ !({o}) -> skip }} :: d_step {{ {o} -> skip }}; goto {L}_b2w fi;")
                s.append(f"goto {L}_excl;")
                s.append(f"{L}_b2w:")
                s.append("do")
                s.append(f"  :: d_step {{ !({other_bk_any(me)}) -> skip }}; goto {L}_b2")
            else:
                s.append("do   /* B2: listdir after announcing */")
                s.append(f"  :: d_step {{ !({other_bk_any(me)}) -> " + P(me, "listdir: no other break marker: breaking exclusively") + " }; break")
            s.append(f"  :: d_step {{ {other_bk_dead(me)} -> {gc_bk(me)} }}")
            s.append(f"  :: d_step {{ {other_bk_live(me, True)} -> {my} = 0; " + P(me, "a prior breaker is active: withdraw marker") + f" }}; goto {L}_done")
            s.append("od;")
            s.append(f"{L}_excl:")
            s.append("if   /* B3: re-read the master file while exclusive */")
            s.append(f"  :: d_step {{ M != 0 && {deadj('M', me)} -> victim = M; " + P(me, "re-read .master_lock: owner P%d.%d judged dead", proc_of("M"), f"((M - 1) % {NINC})" if NINC > 1 else "0") + " };")
            s.append("     d_step { " + ("assert(M == 0 || M == victim); " if a.victim else "") + "M = 0; victim = 0; " + P(me, "unlink .master_lock") + " }")
            s.append(f"  :: d_step {{ !(M != 0 && {deadj('M', me)}) -> " + P(me, "re-read .master_lock: gone or owner alive: nothing to do") + " }")
            s.append("fi;")
            s.append(f"d_step {{ {my} = 0; " + P(me, "unlink own .break marker") + " };")
            s.append(f"{L}_done: skip")
        return "\n".join(s)

    def dead_master_guard(me):
        v = "victim = M; " if brk in ("naive", "tomb") else ""
        return f"d_step {{ M != 0 && {deadj('M', me)} -> {v}" + P(me, "listdir: .master_lock owner P%d.%d judged dead", proc_of("M"),
                                                                 f"((M - 1) % {NINC})" if NINC > 1 else "0") + " }"

    def crash_handler(me, reader):
        s = [f"crashreq[{me}] -> d_step {{", f"  crashreq[{me}] = 0;"]
        if reader:
            s.append(f"  if :: st[{me}] == CS -> nrcs-- :: else fi;")
            if a.prio:
                s.append(f"  owe[{me - NW}] = 0;")
        else:
            s.append(f"  if :: st[{me}] == CS -> nwcs-- :: else fi;")
            s.append("  " + bitclear_all(me) + ";")
            if a.fifo:
                s.append(f"  ahead[{me}] = 0;")
        s.append("  " + P(me, "CRASH (its files stay)") + ";")
        s.append(f"  st[{me}] = IDLE; inc[{me}]++;")
        if fixed and brk in ("naive", "tomb", "excl"):
            s.append("  victim = 0;")
        if fixed and brk == "tomb":
            s.append("  tomb = 0;")
        if fixed and reader and a.v1 in ("wake", "armed"):
            s.append("  v1 = 0;")
        if fixed and not reader and a.v2:
            s.append("  v2 = 0;")
        if fixed and not reader and a.tokens:
            s.append("  tok = 0;")
        s.append("  skip }")
        return "\n".join(s)

    def locals_(reader=None):
        l = []
        if fixed and reader is True and a.v1 in ("wake", "armed"):
            l.append("bit v1;")
        if fixed and reader is False and a.v2:
            l.append("bit v2;")
        if fixed and reader is False and a.tokens:
            l.append("byte tok;")
        if fixed and brk in ("naive", "tomb", "excl"):
            l.append("byte victim;")
        if fixed and brk == "tomb":
            l.append("byte tomb;")
        return " ".join(l)

    # ----------------------------------------------------------- writers
    for me in range(NW):
        O = own(me)
        enter = (f"d_step {{ {{cond}} -> " + ("assert(nwcs == 0 && nrcs == 0); " if a.mutex else "")
                 + (f"assert(ahead[{me}] == 0); " if a.fifo else "")
                 + f"nwcs++; st[{me}] = CS; {bitclear_all(me)}; " + P(me, "{msg}: ENTER (write)") + " }")
        w(f"\nactive proctype {name(me)}() {{")
        w("  " + locals_(False))
        w("endidle:\n  do\n  :: {")
        w("    if")
        start = (f"atomic {{ st[{me}] = TRY; " + ("v2 = 0; " if fixed and a.v2 else "")
                 + (f"ahead[{me}] = {live_writer_mask(me)}; " if a.fifo else "")
                 + f"qinsert({O}); " + P(me, "create .pending_lock (queue position %d)", "hpos") + "; hj = 0; hpos = 0 }")
        w(f"    :: {start}")
        if a.stop:
            w("    :: goto endstop")
        w("    fi;")
        if fixed:
            w("Wwait:")
            w("    do")
            w(f"    :: d_step {{ M == 0 && Q[0] == {O} -> " + P(me, "listdir: no .master_lock, my pending file is the oldest") + " };")
            w("       if")
            w(f"       :: d_step {{ M == 0 -> M = {O}; " + P(me, "create .master_lock (exclusive): ok") + " }; break")
            w(f"       :: d_step {{ M != 0 -> " + P(me, "create .master_lock: EEXIST") + " }")
            w("       fi")
            if a.v2:
                # own pending file present and no older LIVE pending file (older ones all judged dead)
                oldest = " || ".join("(" + " && ".join([f"Q[{j}] == {O}"] + [deadj(f"Q[{i}]", me) for i in range(j)]) + ")"
                                     for j in range(NQ))
                w(f"    :: d_step {{ !v2 && M != 0 && ({oldest}) -> v2 = 1; "
                  + P(me, "listdir: .master_lock present, own pending file is the oldest live one: sleep (V2 armed)") + " }")
                w(f"    :: d_step {{ v2 && M == 0 -> v2 = 0; M = {O}; "
                  + P(me, "woken: V2 skips W2's listing; create .master_lock (exclusive): ok") + " }; break")
                w(f"    :: d_step {{ v2 && M != 0 -> v2 = 0; "
                  + P(me, "woken: V2 skips W2's listing; create .master_lock: EEXIST, back to the W2 loop") + " }")
            if brk != "none":
                w(f"    :: {dead_master_guard(me)};")
                w(break_master(me, "Wb"))
            w(f"    :: d_step {{ {dead_q(me)} -> {gcq(me)} }}")
            inq_own = " || ".join(f"Q[{j}] == {O}" for j in range(NQ))
            w(f"    :: atomic {{ !({inq_own}) -> qinsert({O}); "
              + P(me, "own pending file vanished (judged dead): re-create it (queue position %d)", "hpos") + "; hj = 0; hpos = 0 }")
            if a.giveup:
                w(f"    :: d_step {{ true -> qremove({O}); st[{me}] = IDLE; {bitclear_all(me)}; "
                  + (f"ahead[{me}] = 0; " if a.fifo else "") + P(me, "timeout: unlink own pending file, give up") + " }; goto endidle")
            w("    od;")
            w(f"    skip; d_step {{ qremove({O}); " + P(me, "unlink own pending file") + " };")
            t4 = (f"d_step {{ hj = 1; do :: hj < tok -> T[hj] = 0; hj++ :: else -> break od; hj = 0; "
                  + P(me, "T4: unlink every .token-k with k < %d", "tok") + " }")
            if K:
                w("Wtok:\n    skip;")
                w(f"    d_step {{ hj = {K}; do :: hj > 0 && !T[hj] -> hj-- :: else -> break od; tok = hj; hj = 0; "
                  + "assert(tok >= gmax); " + P(me, "T1: highest .token-k is k = %d", "tok") + " };")
                w("    if")
                v4me = a.v4 and (not a.v4_mixed or me == 0)
                if not v4me:
                    w(f"    :: d_step {{ tok < {K} && !T[tok + 1] -> tok++; T[tok] = 1; " + P(me, "T2: create .token-%d: ok", "tok") + " }")
                    w(f"    :: d_step {{ tok < {K} && T[tok + 1] -> tok = 0; " + P(me, "T2: create .token: EEXIST") + " }; goto Wtok")
                else:
                    # V4: n = 0: ordinary put(.token-1); n >= 1: renameat2(.token-n, .token-(n+1), RENAME_NOREPLACE)
                    pr = lambda o: "assert(0); " if a.v4_probe == o else ""
                    w(f"    :: d_step {{ tok == 0 && !T[1] -> tok = 1; T[1] = 1; " + P(me, "T2: create .token-1: ok") + " }")
                    w(f"    :: d_step {{ tok == 0 && T[1] -> " + P(me, "T2: create .token-1: EEXIST") + " }; goto Wtok")
                    if a.v4_mutant == "overwrite":
                        # MUTANT: plain rename(2), replaces an existing .token-(n+1)
                        w(f"    :: d_step {{ tok > 0 && tok < {K} && !T[tok] -> {pr('enoent')}tok = 0; "
                          + P(me, "V4 rename .token-n -> .token-n+1: ENOENT") + " }; goto Wtok")
                        w(f"    :: d_step {{ tok > 0 && tok < {K} && T[tok] -> {pr('ok')}"
                          + (f"hj = 1; do :: hj < tok && !T[hj] -> hj++ :: else -> break od; if :: hj < tok -> assert(0) :: else fi; hj = 0; " if a.v4_probe == "lower" else "")
                          + "T[tok] = 0; tok++; T[tok] = 1; "
                          + P(me, "V4 MUTANT rename(.token-n, .token-%d) without NOREPLACE: ok", "tok") + " }")
                    else:
                        w(f"    :: d_step {{ tok > 0 && tok < {K} && T[tok + 1] -> {pr('eexist')}tok = 0; "
                          + P(me, "V4 renameat2(.token-n, .token-n+1, NOREPLACE): EEXIST") + " }; goto Wtok")
                        w(f"    :: d_step {{ tok > 0 && tok < {K} && !T[tok + 1] && !T[tok] -> {pr('enoent')}tok = 0; "
                          + P(me, "V4 renameat2(.token-n, .token-n+1, NOREPLACE): ENOENT") + " }; goto Wtok")
                        w(f"    :: d_step {{ tok > 0 && tok < {K} && !T[tok + 1] && T[tok] -> {pr('ok')}"
                          + (f"hj = 1; do :: hj < tok && !T[hj] -> hj++ :: else -> break od; if :: hj < tok -> assert(0) :: else fi; hj = 0; " if a.v4_probe == "lower" else "")
                          + "T[tok] = 0; tok++; T[tok] = 1; "
                          + P(me, "V4 renameat2(.token-n, .token-%d, NOREPLACE): ok", "tok") + " }")
                w(f"    :: d_step {{ tok >= {K} -> M = 0; st[{me}] = IDLE; tok = 0; {bitclear_all(me)}; "
                  + (f"ahead[{me}] = 0; " if a.fifo else "") + P(me, "token space of the model exhausted: unlink .master_lock, stop for good") + " }; goto endstop")
                w("    fi;")
                chk = " && ".join(f"!(T[{k}] && {k} > tok)" for k in range(1, K + 1))
                if a.tok_lost:
                    # two processes may believe they hold the lock (lease): T3 finding a higher token is the
                    # protocol's "lock lost" outcome (fail, remove nothing that is not ours), not an error
                    higher = " || ".join(f"(T[{k}] && {k} > tok)" for k in range(1, K + 1))
                    w("    if")
                    w(f"    :: d_step {{ {higher} -> st[{me}] = IDLE; if :: M == {O} -> M = 0 :: else fi; tok = 0; {bitclear_all(me)}; "
                      + (f"ahead[{me}] = 0; " if a.fifo else "") + P(me, "T3: a higher token exists: lock lost, fail") + " }; goto endidle")
                    w(f"    :: d_step {{ !({higher}) -> assert(tok > gmax); gmax = tok; " + P(me, "T3: no higher token: granted token %d", "tok") + " }")
                    w("    fi;")
                else:
                    w(f"    d_step {{ assert({chk}); assert(tok > gmax); gmax = tok; " + P(me, "T3: no higher token: granted token %d", "tok") + " };")
                if not a.v3:
                    w(f"    {t4[:-2]}; tok = 0 }};")
            lost = (f"d_step {{ M != {O} -> st[{me}] = IDLE; {bitclear_all(me)}; " + (f"ahead[{me}] = 0; " if a.fifo else "")
                    + P(me, "lock lost: .master_lock is no longer mine") + " }")
            w("Wdrain:")
            if a.scan:
                for k in range(NR * NINC):
                    w(f"    if :: d_step {{ !S[{k}] -> skip }} :: d_step {{ S[{k}] -> skip }}; goto Wdrainw fi;")
                w("    if")
                w("    :: " + enter.replace("{cond}", f"M == {O}").replace("{msg}", "readdir: no .slave_lock") + "; goto Wrel")
                w(f"    :: {lost}; goto endidle")
                w("    fi;")
                w("Wdrainw:")
                w("    do")
                w("    :: d_step { nS == 0 -> skip }; goto Wdrain")
            else:
                w("    do")
                w("    :: " + enter.replace("{cond}", f"nS == 0 && M == {O}").replace("{msg}", "listdir: no .slave_lock") + "; break")
                w(f"    :: {lost}; goto endidle")
            if NR:
                w(f"    :: d_step {{ {dead_s(me)} -> {gc_s(me)} }}")
            if a.giveup:
                w(f"    :: d_step {{ true -> M = 0; st[{me}] = IDLE; {bitclear_all(me)}; "
                  + (f"ahead[{me}] = 0; " if a.fifo else "") + P(me, "timeout: unlink .master_lock, give up") + " }; goto "
                  + ("Wt4" if K and a.v3 else "endidle"))
            w("    od;")
            w("Wrel:")
            w(f"    skip; d_step {{ nwcs--; st[{me}] = IDLE; M = 0; " + P(me, "leave; unlink .master_lock") + " };")
            if K and a.v3:
                w("Wt4:\n    skip;")
                w(f"    if :: {t4[:-2]}; tok = 0 }} :: d_step {{ tok = 0; " + P(me, "(crash before T4: lower tokens stay)") + " } fi;")
            w("    goto endidle")
        else:
            # ---- original GlobalDirectoryLock writer
            nomo = " && ".join(f"!MO[{k}]" for k in range(NW * NINC))
            w(f"    d_step {{ {nomo} && Q[0] == {O} -> " + P(me, "listdir: no .master_lock*, my pending file is the oldest") + " };")
            w(f"    d_step {{ MO[{idx(me)}] = 1; " + P(me, "create .master_lock-<my uuid> (O_EXCL): ok") + " };")
            w(f"    d_step {{ qremove({O}); " + P(me, "unlink own pending file") + " };")
            w("    " + enter.replace("{cond}", "nS == 0").replace("{msg}", "listdir: no .slave_lock*") + ";")
            w(f"    d_step {{ nwcs--; st[{me}] = IDLE; MO[{idx(me)}] = 0; " + P(me, "leave; unlink .master_lock-<my uuid>") + " };")
            w("    goto endidle")
        w(f"  }} unless {{ {crash_handler(me, False)} }}")
        w("  od;")
        w("endstop: skip")
        w("}")

    # ----------------------------------------------------------- readers
    for me in range(NW, NP):
        r = me - NW
        SO = f"S[{idx(me, NW)}]"
        enter = (f"d_step {{ {{cond}} -> " + ("assert(nwcs == 0); " if a.mutex else "") + (f"assert(owe[{r}] == 0); " if a.prio else "")
                 + f"nrcs++; st[{me}] = CS; " + P(me, "{msg}: ENTER (read)") + " }")
        release = f"d_step {{ nrcs--; st[{me}] = IDLE; {SO} = 0; nS--; " + P(me, "leave; unlink own .slave_lock") + " }"
        w(f"\nactive proctype {name(me)}() {{")
        w("  " + locals_(True))
        w("endidle:\n  do\n  :: {")
        w(f"    skip; d_step {{ true -> st[{me}] = TRY; " + (f"owe[{r}] = {live_writer_mask()}; " if a.prio else "")
          + ("v1 = 0; " if fixed and a.v1 in ("wake", "armed") else "") + P(me, "start read attempt") + " };")
        if fixed:
            w("Rwait:")
            w("    do")
            w(f"    :: d_step {{ M == 0 && Q[0] == 0 -> " + P(me, "listdir: no .master_lock, no pending") + " }; break")
            if a.v1 in ("wake", "armed"):
                live_m = f" && !{deadj('M', me)}" if a.v1 == "armed" else ""   # a listing that shows a dead master breaks it (R1)
                w(f"    :: d_step {{ !v1 && M != 0{live_m} && Q[0] == 0 -> v1 = 1; "
                  + P(me, "listdir: .master_lock present, no pending: sleep (V1 armed)") + " }")
                w(f"    :: d_step {{ v1 && Q[0] != 0 -> v1 = 0; "
                  + P(me, "listdir: a pending file is present (V1 disarmed)") + " }")
                if a.v1 == "wake":
                    w(f"    :: d_step {{ v1 && M == 0 -> v1 = 0; "
                      + P(me, "woken: .master_lock removed; V1 skips R1's listing") + " }; break")
                else:
                    w(f"    :: d_step {{ v1 -> v1 = 0; "
                      + P(me, "woken (any reason); V1 skips R1's listing") + " }; break")
            elif a.v1 == "loose":
                w(f"    :: d_step {{ true -> " + P(me, "V1 (loose): skip R1 entirely") + " }; break")
            if brk != "none":
                w(f"    :: {dead_master_guard(me)};")
                w(break_master(me, "Rb"))
            if NW:
                w(f"    :: d_step {{ {dead_q(me)} -> {gcq(me)} }}")
            if a.giveup:
                w(f"    :: d_step {{ true -> st[{me}] = IDLE; " + (f"owe[{r}] = 0; " if a.prio else "")
                  + P(me, "timeout: give up") + " }; goto endidle")
            w("    od;")
            w(f"    skip; d_step {{ {SO} = 1; nS++; " + P(me, "create .slave_lock (announce)") + " };")
            if a.scan == 0:
                w("    if")
                w("    :: " + enter.replace("{cond}", "M == 0 && Q[0] == 0").replace("{msg}", "listdir: no .master_lock, no pending") + ";")
                w("       " + release + "; goto endidle")
                w(f"    :: d_step {{ !(M == 0 && Q[0] == 0) -> " + P(me, "listdir: .master_lock or pending present") + " }")
                w("    fi;")
            else:
                first, second = (("Q[0] == 0", "readdir: no pending"), ("M == 0", "lstat .master_lock: ENOENT"))
                if a.scan == 2:
                    first, second = second, first
                w(f"    if :: d_step {{ {first[0]} -> " + P(me, first[1]) + " }")
                w(f"       if :: {enter.replace('{cond}', second[0]).replace('{msg}', second[1])};")
                w(f"             {release}; goto endidle")
                w(f"          :: d_step {{ !({second[0]}) -> skip }}")
                w("       fi")
                w(f"    :: d_step {{ !({first[0]}) -> skip }}")
                w("    fi;")
            w(f"    d_step {{ {SO} = 0; nS--; " + P(me, "back off: unlink own .slave_lock") + " };")
            w("    goto Rwait")
        else:
            nomo = " && ".join(f"!MO[{k}]" for k in range(NW * NINC)) or "1"
            w(f"    d_step {{ {nomo} && Q[0] == 0 -> " + P(me, "listdir: no .master_lock*, no pending") + " };")
            w(f"    d_step {{ {SO} = 1; nS++; " + P(me, "create .slave_lock-<my uuid>") + " };")
            w("    " + enter.replace("{cond}", "true").replace("{msg}", "no re-check after creating it") + ";")
            w("    " + release + ";")
            w("    goto endidle")
        w(f"  }} unless {{ {crash_handler(me, True)} }}")
        w("  od")
        w("}")

    # ----------------------------------------------------------- chaos
    if CRASH:
        w("\nactive proctype Chaos() {\nend:\n  do")
        for p in range(NP):
            w(f"  :: d_step {{ ncrash < {CRASH} && st[{p}] != IDLE && !crashreq[{p}] -> crashreq[{p}] = 1; ncrash++ }}")
        w("  od\n}")

    # ----------------------------------------------------------- LTL
    wl = " && ".join(f"[] ((st[{p}] == TRY) -> <> (st[{p}] != TRY))" for p in range(NW)) or "true"
    quiet = " && ".join(f"st[{p}] == IDLE" for p in range(NW)) or "true"
    rl = " && ".join(f"[] ((st[{p}] == TRY) -> <> (st[{p}] != TRY))" for p in range(NW, NP)) or "true"
    w(f"\nltl wlive {{ {wl} }}")
    w(f"ltl rlive {{ (<> [] ({quiet})) -> ({rl}) }}")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nw", type=int, default=2)
    ap.add_argument("--nr", type=int, default=2)
    ap.add_argument("--crash", type=int, default=1, help="crash budget (crashed processes restart)")
    ap.add_argument("--proto", choices=["orig", "fixed"], default="fixed")
    ap.add_argument("--break", dest="brk", choices=["none", "naive", "tomb", "excl"], default="excl")
    ap.add_argument("--lease", action="store_true", help="a live owner may be judged dead (lease expiry)")
    ap.add_argument("--skew", action="store_true", help="a new pending file may sort before existing ones")
    ap.add_argument("--giveup", action="store_true", help="waiting processes may time out")
    ap.add_argument("--scan", type=int, default=0, choices=[0, 1, 2],
                    help="0: listdir is a snapshot; 1: entries read one at a time, reader reads pending "
                         "then .master_lock; 2: reader reads .master_lock first")
    ap.add_argument("--stop", action="store_true", help="writers may stop for good (for reader liveness)")
    ap.add_argument("--no-prio", dest="prio", action="store_false")
    ap.add_argument("--no-mutex", dest="mutex", action="store_false")
    ap.add_argument("--fifo", action="store_true", help="check writer FIFO (meaningless with --skew)")
    ap.add_argument("--no-victim", dest="victim", action="store_false")
    ap.add_argument("--v1", choices=["off", "wake", "armed", "loose"], default="off",
                    help="variant V1 (reader skips R1 after a wake-up). wake: a reader whose R1 listing showed "
                         ".master_lock and no pending file may, once .master_lock is gone, go to R2 without "
                         "R1's listing; armed: the same, but the skip does not wait for .master_lock to be gone (any later "
                         "wake-up, e.g. a poll timeout); loose: a reader may skip R1 at any time")
    ap.add_argument("--v2", action="store_true",
                    help="variant V2 (writer skips W2's listing after a wake-up): a writer whose W2 listing showed "
                         "its own pending file as the oldest live one and a .master_lock may later try "
                         "put(.master_lock) without listing again (EEXIST: back to the W2 loop)")
    ap.add_argument("--tokens", type=int, default=0, metavar="K",
                    help="model the fencing token (§3.7) with token numbers 1..K; a writer that finds .token-K "
                         "releases and stops for good (bounds the number of write grants)")
    ap.add_argument("--v3", action="store_true",
                    help="variant V3: token housekeeping T4 at release, after unlinking .master_lock (needs --tokens)")
    ap.add_argument("--v4", action="store_true",
                    help="variant V4 (needs --tokens): T2 for n >= 1 is one atomic renameat2(.token-n, .token-(n+1), "
                         "RENAME_NOREPLACE): EEXIST or ENOENT: back to T1; else the token is n+1. n = 0: put(.token-1)")
    ap.add_argument("--v4-mixed", action="store_true",
                    help="with --v4: only W0 uses V4, the other writers use the old T2 put (rolling upgrade); "
                         "their crashes between T2 and T4 leave lower tokens that W0's T1 can see")
    ap.add_argument("--v4-mutant", choices=["off", "overwrite"], default="off",
                    help="sanity mutation of V4: overwrite = plain rename(2) that replaces an existing .token-(n+1)")
    ap.add_argument("--v4-probe", choices=["off", "ok", "eexist", "enoent", "lower"], default="off",
                    help="reachability probe: assert(0) in the V4 rename outcome ok / EEXIST / ENOENT, or (lower) "
                         "in a successful rename while a token lower than n exists")
    ap.add_argument("--tok-lost", action="store_true",
                    help="with --tokens: T3 finding a higher token is the legitimate 'lock lost' outcome (for --lease "
                         "runs, where two writers may allocate at once); only uniqueness/monotonicity are asserted")
    ap.add_argument("-o", "--out", default="-")
    a = ap.parse_args()
    if (a.v4 or a.tok_lost) and not a.tokens:
        ap.error("--v4 and --tok-lost need --tokens K")
    if (a.v4_mixed or a.v4_mutant != "off" or a.v4_probe != "off") and not a.v4:
        ap.error("--v4-mixed/--v4-mutant/--v4-probe need --v4")
    text = build(a)
    if a.out == "-":
        sys.stdout.write(text)
    else:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
