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

Namespaces and leases (--ns, --variant; docs/protocol.md section 11): every
process has a namespace.  Within one namespace the judgement "owner dead" is
exact (dead iff crashed).  Across namespaces it is a lease: a file is judged
dead iff it is stale.  Each lock file has a stale bit; a Lease process may set
it at any step ("the lease expires") when the owner does not keep the file
fresh: the owner crashed, or (variant old) it is not yet inside, or inside
before its first heartbeat, or (variant pause) always.  Creating or
refreshing a file clears the bit.  Without --ns/--lease the generated model
is byte for byte the one of the shared generator.

Scenario options (--once, --gate, --leave) restrict which runs are searched,
to reproduce a given trace (T1-T3 in run.py).

Options (see --help): --proto orig|fixed, --break none|naive|tomb|excl,
--ns, --variant old|fixed|pause, --lease, --skew, --giveup, --scan 0|1|2,
--crash N, --tokens K and the V1-V4 shortcut variants, property switches.
"""
import argparse
import re
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
    # ---- namespaces and leases (see --ns, --variant; PROTOCOL: docs/protocol.md section 11)
    NSL_ = a.nsl                      # namespace of each process (writers first, then readers)
    LM = a.lm                         # lease mode: some process judges another one by lease
    same = lambda p, q: NSL_[p] == NSL_[q]
    REF = a.refresh                   # create | cs | pause
    HB = LM and REF == "cs"           # hb[p]: p's heartbeat is running (old: only after the grant)
    CHECKED = a.unlink == "checked"

    # ---------------------------------------------------------------- helpers
    def own(p):
        return str(p + 1) if NINC == 1 else f"({p * NINC} + inc[{p}] + 1)"

    def proc_of(e):
        return f"(({e}) - 1)" if NINC == 1 else f"((({e}) - 1) / {NINC})"

    def alive(e):
        return "1" if NINC == 1 else f"(inc[(({e}) - 1) / {NINC}] == (({e}) - 1) % {NINC})"

    def deadj(e, me, stx=None):
        """Judgement 'owner of content e (a writer) is dead' made by process me.
        Same namespace: exact (dead iff crashed).  Other namespace: a lease, dead iff the
        file is stale; stx is that file's stale bit."""
        exact = "0" if NINC == 1 else f"(inc[(({e}) - 1) / {NINC}] != (({e}) - 1) % {NINC})"
        if not LM:
            return exact
        sm = [q for q in range(NW) if same(q, me)]
        if len(sm) == NW:
            return exact
        if not sm:
            return f"({stx})"
        mask = sum(1 << q for q in sm)
        return f"((({mask} >> {proc_of(e)}) & 1) -> {exact} : ({stx}))"

    def slot_alive(p, c):  # slot of process p, incarnation c
        return "1" if NINC == 1 else f"(inc[{p}] == {c})"

    def slot_deadj(p, c, me, stx=None):
        if LM and not same(p, me):
            return f"({stx})"
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
            if a.v11:   # V11: the debt of each thread slot's join
                for k in range(2 * NR):
                    s.append(f"owj[{k}] = owj[{k}] & {0xff & ~(1 << p)}")
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
            if a.v8 != "off":   # V8: a holder's pending file stays while it is inside: only waiters count
                inq = f"({inq}) && st[{q}] == TRY"
            if fixed:
                hold = f"(M == {own(q)} && st[{q}] == TRY)"
            else:
                hold = f"(MO[{idx(q)}] && st[{q}] == TRY)"
            terms.append(f"(({inq}) || {hold} -> {1 << q} : 0)")
        return " | ".join(terms) if terms else "0"

    def clr(x):  # a file is removed or created: its stale bit (lease mode only) is cleared
        return f"{x} = 0; " if LM else ""

    dead_q = lambda me: " || ".join(f"(Q[{j}] != 0 && {deadj(f'Q[{j}]', me, f'stP[Q[{j}] - 1]')})" for j in range(NQ))

    def s_owner(k):
        return NW + k // NINC, k % NINC

    def bk_owner(k):
        return k // NINC, k % NINC

    dead_s = lambda me: " || ".join(
        f"(S[{k}] && {slot_deadj(*s_owner(k), me, f'stS[{k}]')})" for k in range(NR * NINC)) or "0"

    def gc_s(me):
        s = []
        for k in range(NR * NINC):
            s.append(f"if :: S[{k}] && {slot_deadj(*s_owner(k), me, f'stS[{k}]')} -> S[{k}] = 0; nS--; {clr(f'stS[{k}]')}"
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
                t.append(f"(BK[{k}] && {slot_deadj(p, c, me, f'stB[{k}]')})")
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
                cond = f"BK[{k}] && {slot_deadj(p, c, me, f'stB[{k}]')}"
            s.append(f"if :: {cond} -> BK[{k}] = 0; {clr(f'stB[{k}]')}" + P(me, f"unlink .break marker of P{p}.{c} (owner judged dead)") + " :: else fi")
        return "; ".join(s) or "skip"

    # --------------------------------------------------------------- globals
    shown = [x for i, x in enumerate(sys.argv[1:]) if x not in ("-o", "--out") and sys.argv[i] not in ("-o", "--out")]
    w(f"/* generated by: python3 gen_model.py {' '.join(shown)} */")
    w(f"/* NW={NW} NR={NR} CRASH={CRASH} proto={a.proto} break={brk} lease={int(a.lease)} "
      f"skew={int(a.skew)} giveup={int(a.giveup)} scan={a.scan} */")
    if a.v1 != "off" or a.v2 or a.tokens:
        w(f"/* variants: v1={a.v1} v2={int(a.v2)} tokens={a.tokens} v3={int(a.v3)} */")
    if a.v5:
        w("/* V5: a writer's W2 removes only the dead pending files between its own and the nearest live older one */")
    if a.v7 != "off":
        w(f"/* V7: a reader whose last R3 found no .master_lock and no pending file skips R1 "
          f"(v7={a.v7} probe={a.v7_probe}) */")
    if a.v8 != "off":
        w(f"/* V8: a writer keeps its pending file until it has removed .master_lock (v8={a.v8} probe={a.v8_probe}) */")
    if a.v9 != "off":
        w(f"/* V9: a writer whose only older pending file is the holder's waits for .master_lock as V2 does "
          f"(v9={a.v9} probe={a.v9_probe}) */")
    if a.v12 != "off":
        w(f"/* V12: a queued writer woken by the removal of its predecessor's pending file creates .master_lock "
          f"without W2's listing and decides FIFO on the listing after it (v12={a.v12} probe={a.v12_probe}) */")
    if a.v13 != "off":
        w(f"/* V13: only a writer with no live pending file between its own and the head of the queue judges "
          f".master_lock (v13={a.v13} probe={a.v13_probe}) */")
    if a.v11:
        w(f"/* V11: threads of one reader process share its marker: two thread slots, a join lists, then checks "
          f"the marker (probe={a.v11_probe} mutant={int(a.v11_mutant)}) */")
    if a.v6:
        w(f"/* V6: a writer that finds no .master_lock and no pending file creates .master_lock directly "
          f"(probe={a.v6_probe} mutant={a.v6_mutant}) */")
    if a.v4 or a.tok_lost:
        w(f"/* V4: v4={int(a.v4)} mixed={int(a.v4_mixed)} mutant={a.v4_mutant} probe={a.v4_probe} tok_lost={int(a.tok_lost)} */")
    if LM:
        w(f"/* leases: ns={','.join(map(str, NSL_))} refresh={REF} touch_grant={int(a.touch_grant)} w6={int(a.w6)} "
          f"unlink={a.unlink} own_entry={int(a.own_entry)} own_unlink={int(a.own_unlink)} */")
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
    if a.v11:
        w(f"byte owj[{max(2 * NR, 1)}];           /* V11: per thread slot of a reader: writers its join must not overtake */")
    w(f"byte ahead[{max(NW, 1)}];         /* per writer: writers queued before it */")
    w("byte hj, hk, hpos;      /* scratch, always 0 between steps */")
    if a.once:
        w(f"bit  started[{NP}];      /* scenario (--once): each process makes one attempt */")
    if LM:
        w("/* ---- leases: a stale file (not refreshed within the lease) may be judged dead by another namespace ---- */")
        w("bit  Mst;               /* .master_lock is stale */")
        w(f"bit  stP[{NQ}];          /* pending file of writer incarnation o-1 is stale */")
        w(f"bit  stS[{NSL}];          /* .slave_lock of reader slot k is stale */")
        w(f"bit  stB[{NBK}];          /* .break marker of slot k is stale */")
        if HB:
            w(f"bit  hb[{NP}];           /* the process's heartbeat has refreshed its files (old: only inside) */")
    K = a.tokens
    if fixed and K:
        w(f"bit  T[{K + 1}];            /* .token-<k>, k = 1..{K} */")
        w("byte gmax;              /* monitor: highest token granted (passed T3) so far */")
        if a.v14 != "off":
            w("byte glast;             /* V14 monitor: owner code of the writer that entered last */")

    # queue inlines
    w(f"""
inline qinsert(o) {{
  hj = 0;
  do :: hj < {NQ} && Q[hj] != 0 -> hj++ :: else -> break od;   /* hj = queue length */
  hpos = hj;""")
    if a.skew:
        w("  do :: hpos > 0 -> hpos-- :: true -> break od;   /* ns taken earlier / clock skew: any position */")
    w(f"""  do :: hj > hpos -> Q[hj] = Q[hj-1]; hj-- :: else -> break od;
  Q[hpos] = o{"; stP[o - 1] = 0" if LM else ""}
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
  hj = 0{"; stP[o - 1] = 0" if LM else ""}
}}""")

    def gcq(me):
        return (f"hj = 0; hk = 0; "
                f"do :: hj < {NQ} -> if :: Q[hj] != 0 && !{deadj('Q[hj]', me, 'stP[Q[hj] - 1]')} -> Q[hk] = Q[hj]; hk++ "
                + (":: Q[hj] != 0 && " + deadj('Q[hj]', me, 'stP[Q[hj] - 1]') + " -> stP[Q[hj] - 1] = 0 " if LM else "")
                + f":: else fi; hj++ "
                f":: else -> break od; "
                f"do :: hk < {NQ} -> Q[hk] = 0; hk++ :: else -> break od; hj = 0; hk = 0; "
                + P(me, "unlink pending file(s) whose owner is judged dead"))

    def v5_guard(me):
        """V5 (W2): the pending file just older than mine (nearest to mine) exists and is judged dead."""
        O = own(me)
        return " || ".join(f"(Q[{j}] == {O} && Q[{j - 1}] != 0 && {deadj(f'Q[{j - 1}]', me, f'stP[Q[{j - 1}] - 1]')})"
                           for j in range(1, NQ)) or "0"

    def gcq_v5(me):
        """V5 (W2): walk from my own queue position towards the head, removing every pending
        file judged dead, and stop at the first live one (the nearest live older writer), or
        at the head.  Younger files, and files older than that live one, are not judged.
        hk = my position, hj = the first position removed; positions hj..hk-1 go."""
        O = own(me)
        dj = deadj('Q[hj - 1]', me, 'stP[Q[hj - 1] - 1]')
        return (f"hk = 0; do :: hk < {NQ} && Q[hk] != {O} -> hk++ :: else -> break od; "
                f"hj = hk; do :: hj > 0 && {dj} -> hj-- :: else -> break od; "
                + (f"hpos = hj; do :: hpos < hk -> stP[Q[hpos] - 1] = 0; hpos++ :: else -> break od; hpos = 0; " if LM else "")
                + f"do :: hk < {NQ} -> Q[hj] = Q[hk]; hj++; hk++ :: else -> break od; "
                f"do :: hj < {NQ} -> Q[hj] = 0; hj++ :: else -> break od; hj = 0; hk = 0; "
                + P(me, "V5: unlink the dead pending file(s) just older than mine, up to the nearest live one"))

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
            myst = f"stB[{idx(me)}]"
            s.append(f"do   /* B0: wait until no other live break marker */")
            s.append(f"  :: d_step {{ !({other_bk_live(me)}) -> skip }}; break")
            s.append(f"  :: d_step {{ {other_bk_dead(me)} -> {gc_bk(me)} }}")
            s.append(f"  :: d_step {{ M == 0 || !{deadj('M', me, 'Mst')} -> " + P(me, "master gone or alive: stop breaking") + f" }}; goto {L}_done")
            s.append("od;")
            s.append(f"skip; d_step {{ {my} = 1; {clr(myst)}" + P(me, "create .break marker") + " };")
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
            s.append(f"  :: d_step {{ {other_bk_live(me, True)} -> {my} = 0; {clr(myst)}" + P(me, "a prior breaker is active: withdraw marker") + f" }}; goto {L}_done")
            s.append("od;")
            s.append(f"{L}_excl:")
            s.append("if   /* B3: re-read the master file while exclusive */")
            s.append(f"  :: d_step {{ M != 0 && {deadj('M', me, 'Mst')} -> victim = M; " + P(me, "re-read .master_lock: owner P%d.%d judged dead", proc_of("M"), f"((M - 1) % {NINC})" if NINC > 1 else "0") + " };")
            s.append("     d_step { " + ("assert(M == 0 || M == victim); " if a.victim else "") + "M = 0; victim = 0; " + clr("Mst") + P(me, "unlink .master_lock") + " }")
            s.append(f"  :: d_step {{ !(M != 0 && {deadj('M', me, 'Mst')}) -> " + P(me, "re-read .master_lock: gone or owner alive: nothing to do") + " }")
            s.append("fi;")
            s.append(f"d_step {{ {my} = 0; {clr(myst)}" + P(me, "unlink own .break marker") + " };")
            s.append(f"{L}_done: skip")
        return "\n".join(s)

    def dead_master_guard(me):
        v = "victim = M; " if brk in ("naive", "tomb") else ""
        return f"d_step {{ M != 0 && {deadj('M', me, 'Mst')} -> {v}" + P(me, "listdir: .master_lock owner P%d.%d judged dead", proc_of("M"),
                                                                 f"((M - 1) % {NINC})" if NINC > 1 else "0") + " }"

    def crash_handler(me, reader):
        s = [f"crashreq[{me}] -> d_step {{", f"  crashreq[{me}] = 0;"]
        if reader and a.v11:   # V11: every thread slot inside leaves nrcs; the process's files stay
            s.append("  if :: th[0] == 4 -> nrcs-- :: else fi; if :: th[1] == 4 -> nrcs-- :: else fi;")
            s.append("  th[0] = 0; th[1] = 0; jf = 0;")
            if a.prio:
                s.append(f"  owe[{me - NW}] = 0; owj[{2 * (me - NW)}] = 0; owj[{2 * (me - NW) + 1}] = 0;")
        elif reader:
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
        if fixed and reader and a.v10:
            s.append("  v10 = 0;")
        if fixed and reader and a.v7 != "off":
            s.append("  v7 = 0;")
        if fixed and not reader and a.v2:
            s.append("  v2 = 0;")
        if fixed and not reader and a.tokens:
            s.append("  tok = 0;")
        if HB:
            s.append(f"  hb[{me}] = 0;")
        s.append("  skip }")
        return "\n".join(s)

    def locals_(reader=None):
        l = []
        if fixed and reader is True and a.v1 in ("wake", "armed"):
            l.append("bit v1;")
        if fixed and reader is True and a.v7 != "off":
            l.append("bit v7;")
        if fixed and reader is True and a.v10:
            l.append("byte v10; byte v10i;")
        if fixed and reader is True and a.v11:
            l.append("byte th[2]; bit jf;")
        if fixed and reader is False and a.v2:
            l.append("bit v2;")
        if fixed and reader is False and a.v12 != "off":
            l.append("byte v12; bit v12c;")
        if fixed and reader is False and a.tokens:
            l.append("byte tok;")
        if fixed and brk in ("naive", "tomb", "excl"):
            l.append("byte victim;")
        if fixed and brk == "tomb":
            l.append("byte tomb;")
        return " ".join(l)

    # ----------------------------------------------------------- scenario gates (--once, --gate)
    pid_of = {name(p): p for p in range(NP)}
    fn = {"inside": lambda p: f"st[{p}] == CS", "waiting": lambda p: f"st[{p}] == TRY",
          "holds": lambda p: f"M == {own(p)}", "done": lambda p: f"(started[{p}] && st[{p}] == IDLE)",
          "beating": lambda p: f"hb[{p}]" if HB else "1"}   # without variant old's hb, files are kept fresh
    def parse_gates(opt, specs):
        gates = {}
        for g in specs:
            who, _, expr = g.partition("=")
            if who not in pid_of:
                raise SystemExit(f"{opt} {g}: unknown process {who}")

            def sub(m):
                if m.group(2) not in pid_of:
                    raise SystemExit(f"{opt} {g}: unknown process {m.group(2)}")
                return "(" + fn[m.group(1)](pid_of[m.group(2)]) + ")"
            gates.setdefault(pid_of[who], []).append(re.sub(r"(inside|waiting|holds|done|beating)\((\w+)\)", sub, expr))
        return gates
    gates = parse_gates("--gate", a.gate)
    leaves = {p: " && ".join(g) for p, g in parse_gates("--leave", a.leave).items()}

    def gives_up(me):  # --giveup: every process may time out; --giveup-only: just these
        if a.giveup_only:
            return name(me) in a.giveup_only.split(",")
        return a.giveup

    def start_guard(me):
        g = ([f"!started[{me}]"] if a.once else []) + gates.get(me, [])
        if not g:
            return ""
        return " && ".join(g) + " -> " + (f"started[{me}] = 1; " if a.once else "")

    # ----------------------------------------------------------- writers
    for me in range(NW):
        O = own(me)
        enter = (f"d_step {{ {{cond}} -> " + ("assert(nwcs == 0); " if a.mutex and a.ww_only else
                                              "assert(nwcs == 0 && nrcs == 0); " if a.mutex else "")
                 + (f"assert(ahead[{me}] == 0); " if a.fifo else "")
                 + (f"assert(M == {O}); " if LM and a.own_entry else "")
                 + (f"if :: M == {O} -> Mst = 0 :: else fi; " if LM and a.touch_grant else "")
                 + (f"hb[{me}] = 1; " if HB and a.touch_grant else "")
                 + (f"glast = {O}; " if fixed and K and a.v14 != "off" else "")
                 + f"nwcs++; st[{me}] = CS; {bitclear_all(me)}; " + P(me, "{msg}: ENTER (write)") + " }")
        giveup_tail = f"st[{me}] = IDLE; {bitclear_all(me)}; " + (f"ahead[{me}] = 0; " if a.fifo else "")

        def unlink_master(why, then, checked=None):
            """An owner removes .master_lock (W5 timeout, T3 lost, W8 release).  Checked: read it,
            compare the nonce, then unlink: two steps, since POSIX has no compare-and-delete.
            Blind (variant old): unlink whatever is there."""
            checked = CHECKED if checked is None else checked
            chk = f"assert(M == 0 || M == {O}); " if a.own_unlink else ""   # unlinking a missing name does nothing
            if not checked:
                return [f"d_step {{ {chk}M = 0; Mst = 0; {then}" + P(me, why + ": unlink .master_lock without checking it") + " }"]
            return ["if",
                    f":: d_step {{ M == {O} -> " + P(me, why + ": .master_lock holds my nonce") + " };",
                    f"   d_step {{ {chk}M = 0; Mst = 0; {then}" + P(me, why + ": unlink .master_lock") + " }",
                    f":: d_step {{ M != {O} -> {then}" + P(me, why + ": .master_lock is not mine: leave it") + " }",
                    "fi"]
        def lazy_token(me, O):
            """V14 (lazy fencing token): no W4 before the grant; a holder that asks for its token,
            at any point while inside (or never), runs T1 (a listing), T2, T3 (a listing: a higher
            token means a later grant took one: lock lost), then checks that .master_lock is still
            its own (W6's check, a step of its own), and only then is handed the token; T4 after.
            A holder that finds the lock lost hands out nothing and goes on to W8 (which leaves a
            .master_lock that is not its own in place).  Monitor: at the hand-out, the holder is the
            writer that entered last (no grant since its own) and its token is above every token
            handed out before.  mutant nocheck: no ownership check."""
            if not (fixed and K and a.v14 != "off"):
                return
            v4me = a.v4 and (not a.v4_mixed or me == 0)
            higher = " || ".join(f"(T[{k}] && {k} > tok)" for k in range(1, K + 1))
            hand = (f"assert(glast == {O}); assert(tok > gmax); gmax = tok; "
                    + ("assert(0); " if a.v14_probe == "handout" else ""))
            w("    if")
            w("    :: skip   /* V14: never asks for its token */")
            w("    :: true ->")
            w("Wltok:")
            w("       skip;")
            w(f"       d_step {{ hj = {K}; do :: hj > 0 && !T[hj] -> hj-- :: else -> break od; tok = hj; hj = 0; "
              + "assert(tok >= gmax); " + P(me, "V14 token(): T1: highest .token-k is k = %d", "tok") + " };")
            w("       if")
            if not v4me:
                w(f"       :: d_step {{ tok < {K} && !T[tok + 1] -> tok++; T[tok] = 1; " + P(me, "V14 T2: create .token-%d: ok", "tok") + " }")
                w(f"       :: d_step {{ tok < {K} && T[tok + 1] -> tok = 0; " + P(me, "V14 T2: create .token: EEXIST") + " }; goto Wltok")
            else:
                w(f"       :: d_step {{ tok == 0 && !T[1] -> tok = 1; T[1] = 1; " + P(me, "V14 T2: create .token-1: ok") + " }")
                w(f"       :: d_step {{ tok == 0 && T[1] -> " + P(me, "V14 T2: create .token-1: EEXIST") + " }; goto Wltok")
                w(f"       :: d_step {{ tok > 0 && tok < {K} && T[tok + 1] -> tok = 0; "
                  + P(me, "V14 renameat2(.token-n, .token-n+1, NOREPLACE): EEXIST") + " }; goto Wltok")
                w(f"       :: d_step {{ tok > 0 && tok < {K} && !T[tok + 1] && !T[tok] -> tok = 0; "
                  + P(me, "V14 renameat2(.token-n, .token-n+1, NOREPLACE): ENOENT") + " }; goto Wltok")
                w(f"       :: d_step {{ tok > 0 && tok < {K} && !T[tok + 1] && T[tok] -> T[tok] = 0; tok++; T[tok] = 1; "
                  + P(me, "V14 renameat2(.token-n, .token-%d, NOREPLACE): ok", "tok") + " }")
            w(f"       :: d_step {{ tok >= {K} -> tok = 0; " + P(me, "V14: token space of the model exhausted: no token") + " }; goto Wlend")
            w("       fi;")
            if a.tok_lost:
                w("       if")
                w(f"       :: d_step {{ {higher} -> tok = 0; " + P(me, "V14 T3: a higher token exists: lock lost") + " }; goto Wlend")
                w(f"       :: d_step {{ !({higher}) -> " + P(me, "V14 T3: no higher token") + " }")
                w("       fi;")
            else:
                w(f"       d_step {{ assert(!({higher})); " + P(me, "V14 T3: no higher token") + " };")
            if a.v14 == "nocheck":
                w(f"       d_step {{ {hand}" + P(me, "V14 MUTANT: no ownership check: token %d handed out", "tok") + " };")
            else:
                w("       if")
                w(f"       :: d_step {{ M == {O} -> {hand}" + P(me, "V14: .master_lock is still mine: token %d handed out", "tok") + " }")
                w(f"       :: d_step {{ M != {O} -> tok = 0; " + P(me, "V14: .master_lock is not mine: lock lost, no token") + " }; goto Wlend")
                w("       fi;")
            if not a.v3:
                w(f"       d_step {{ hj = 1; do :: hj < tok -> T[hj] = 0; hj++ :: else -> break od; hj = 0; tok = 0; "
                  + P(me, "V14 T4: unlink every lower .token-k") + " }")
            else:
                w("       tok = 0")
            w("    fi;")
            w("Wlend:")
            w("    skip;")

        w(f"\nactive proctype {name(me)}() {{")
        w("  " + locals_(False))
        w("endidle:\n  do\n  :: {")
        w("    if")
        start = (f"atomic {{ {start_guard(me)}st[{me}] = TRY; " + ("v2 = 0; " if fixed and a.v2 else "")
                 + ("v12 = 0; v12c = 0; " if fixed and a.v12 != "off" else "")
                 + (f"ahead[{me}] = {live_writer_mask(me)}; " if a.fifo else "")
                 + f"qinsert({O}); " + P(me, "create .pending_lock (queue position %d)", "hpos") + "; hj = 0; hpos = 0 }")
        w(f"    :: {start}")
        if fixed and a.v6:
            # V6 (fast path): a writer whose first listing shows no .master_lock and no pending file
            # creates .master_lock at once, without a pending file.  EEXIST: queue as usual (W1).
            g = ([f"!started[{me}]"] if a.once else []) + gates.get(me, [])
            look = "Q[0] == 0" if a.v6_mutant != "nolook" else "1"   # mutant: no look at the queue
            g6 = " && ".join([f"({x})" for x in g] + ["M == 0", look])
            w(f"    :: d_step {{ {g6} -> " + (f"started[{me}] = 1; " if a.once else "") + f"st[{me}] = TRY; "
              + ("v2 = 0; " if a.v2 else "") + ("v12 = 0; v12c = 0; " if a.v12 != "off" else "") + (f"ahead[{me}] = {live_writer_mask(me)}; " if a.fifo else "")
              + P(me, "V6: listdir: no .master_lock, no pending file") + " };")
            w("       if")
            w(f"       :: d_step {{ M == 0 -> M = {O}; {clr('Mst')}" + ("assert(0); " if a.v6_probe == "ok" else "")
              + P(me, "V6: create .master_lock (exclusive) without a pending file: ok") + " }; goto Wfast")
            w(f"       :: atomic {{ M != 0 -> " + ("assert(0); " if a.v6_probe == "eexist" else "")
              + (f"ahead[{me}] = {live_writer_mask(me)}; " if a.fifo else "")
              + f"qinsert({O}); " + P(me, "V6: create .master_lock: EEXIST; create .pending_lock (queue position %d)", "hpos")
              + "; hj = 0; hpos = 0 }")
            if gives_up(me):
                w(f"       :: d_step {{ true -> st[{me}] = IDLE; {bitclear_all(me)}; " + (f"ahead[{me}] = 0; " if a.fifo else "")
                  + P(me, "V6: timeout before creating anything: give up") + " }; goto endidle")
            w("       fi")
        if a.stop:
            w("    :: goto endstop")
        w("    fi;")
        if fixed:
            w("Wwait:")
            w("    do")
            w(f"    :: d_step {{ M == 0 && Q[0] == {O} -> " + P(me, "listdir: no .master_lock, my pending file is the oldest") + " };")
            w("       if")
            w(f"       :: d_step {{ M == 0 -> M = {O}; {clr('Mst')}" + P(me, "create .master_lock (exclusive): ok") + " }; break")
            w(f"       :: d_step {{ M != 0 -> " + P(me, "create .master_lock: EEXIST") + " }")
            w("       fi")
            if a.v2:
                # own pending file present and no older LIVE pending file (older ones all judged dead)
                oldest = " || ".join("(" + " && ".join([f"Q[{j}] == {O}"] + [deadj(f"Q[{i}]", me, f"stP[Q[{i}] - 1]") for i in range(j)]) + ")"
                                     for j in range(NQ))
                # With V13 the arming is as the implementation's: only behind a .master_lock judged live
                # (a dead one is broken by the same look).  Without it the model lets a writer arm behind
                # a dead one too, and sleep and wake there forever while writers behind it break it;
                # V13 leaves the break to this writer, so the model must not let it starve it.
                live_m = f" && !{deadj('M', me, 'Mst')}" if a.v13 != "off" else ""
                w(f"    :: d_step {{ !v2 && M != 0{live_m} && ({oldest}) -> v2 = 1; "
                  + P(me, "listdir: .master_lock present, own pending file is the oldest live one: sleep (V2 armed)") + " }")
                if a.v9 != "off":
                    # V9 (with V8): the only pending file older than mine is the holder's own (it keeps it
                    # while inside); its .master_lock going is the event, as for V2.  mutant: any writer just
                    # ahead of me, holder or not
                    hold = "" if a.v9 == "mutant" else "Q[0] == M && "
                    w(f"    :: d_step {{ !v2 && M != 0{live_m} && {hold}Q[1] == {O} -> v2 = 1; " + ("assert(0); " if a.v9_probe == "arm" else "")
                      + P(me, "listdir: .master_lock present, the only older pending file is its holder's: sleep (V9 armed)") + " }")
                w(f"    :: d_step {{ v2 && M == 0 -> v2 = 0; M = {O}; {clr('Mst')}"
                  + P(me, "woken: V2 skips W2's listing; create .master_lock (exclusive): ok") + " }; break")
                w(f"    :: d_step {{ v2 && M != 0 -> v2 = 0; "
                  + P(me, "woken: V2 skips W2's listing; create .master_lock: EEXIST, back to the W2 loop") + " }")
            if a.v12 != "off":
                # V12: a listing shows a live pending file just older than mine (my predecessor): sleep
                # on it.  Woken by its removal, create .master_lock at once (no W2 listing); the listing
                # made after it (W12chk) decides FIFO: an older live pending file -> back off.
                pred_live = " || ".join(
                    f"(Q[{j}] == {O} && Q[{j - 1}] != 0 && !{deadj(f'Q[{j - 1}]', me, f'stP[Q[{j - 1}] - 1]')})"
                    for j in range(1, NQ)) or "0"
                w(f"    :: d_step {{ !v2 && v12 == 0 && ({pred_live}) -> "
                  f"hk = 1; do :: hk < {NQ} && Q[hk] != {O} -> hk++ :: else -> break od; v12 = Q[hk - 1]; hk = 0; "
                  + ("assert(0); " if a.v12_probe == "arm" else "")
                  + P(me, "listdir: the nearest older pending file is live: sleep on it (V12 armed)") + " }")
                pred_gone = "v12 != 0 && " + " && ".join(f"Q[{j}] != v12" for j in range(NQ))
                w(f"    :: d_step {{ {pred_gone} && M == 0 -> v12 = 0; v12c = 1; M = {O}; {clr('Mst')}"
                  + ("assert(0); " if a.v12_probe == "woken" else "")
                  + P(me, "woken: V12 skips W2's listing; create .master_lock (exclusive): ok") + " }; break")
                w(f"    :: d_step {{ {pred_gone} && M != 0 -> v12 = 0; "
                  + P(me, "woken: V12 skips W2's listing; create .master_lock: EEXIST, back to the W2 loop") + " }")
            if brk != "none":
                g = dead_master_guard(me)
                if a.v13 != "off":
                    # V13: only a writer with no live pending file between its own and the head of the
                    # queue judges .master_lock (the first live queued writer, or the one right behind
                    # the head: V9 reads its nonce).  mutant: no writer judges it at all.
                    front = " || ".join(
                        "(" + " && ".join([f"Q[{k}] == {O}"] + [deadj(f"Q[{i}]", me, f"stP[Q[{i}] - 1]") for i in range(1, k)]) + ")"
                        for k in range(NQ)) if a.v13 == "on" else "0"
                    if a.v13_probe == "skip":   # reached: a dead .master_lock that V13 leaves to the writers ahead
                        w(f"    :: d_step {{ M != 0 && {deadj('M', me, 'Mst')} && !({front}) -> assert(0) }}")
                    g = g.replace("d_step { M != 0 && ", f"d_step {{ ({front}) && M != 0 && ", 1)
                w(f"    :: {g};")
                w(break_master(me, "Wb"))
            if a.v5:
                g5 = gcq_v5(me)
                if a.v5_probe == "stop":   # reached: V5 stops at a live file with a dead one older than it
                    older_dead = deadj('Q[hpos]', me, 'stP[Q[hpos] - 1]')
                    g5 = g5.replace(" -> hj-- :: else -> break od; ",
                                    f" -> hj-- :: else -> break od; hpos = 0; do :: hpos + 1 < hj && !{older_dead} -> hpos++ "
                                    f":: else -> break od; if :: hpos + 1 < hj -> assert(0) :: else fi; hpos = 0; ", 1)
                w(f"    :: d_step {{ {v5_guard(me)} -> {g5} }}")
                if a.v5_probe == "skip":   # reached: W2 with a dead pending file that V5 leaves to others
                    w(f"    :: d_step {{ ({dead_q(me)}) && !({v5_guard(me)}) -> assert(0) }}")
            else:
                w(f"    :: d_step {{ {dead_q(me)} -> {gcq(me)} }}")
            inq_own = " || ".join(f"Q[{j}] == {O}" for j in range(NQ))
            w(f"    :: atomic {{ !({inq_own}) -> qinsert({O}); "
              + P(me, "own pending file vanished (judged dead): re-create it (queue position %d)", "hpos") + "; hj = 0; hpos = 0 }")
            if gives_up(me):
                w(f"    :: d_step {{ true -> qremove({O}); st[{me}] = IDLE; {bitclear_all(me)}; "
                  + (f"ahead[{me}] = 0; " if a.fifo else "") + P(me, "timeout: unlink own pending file, give up") + " }; goto endidle")
            w("    od;")
            if a.v8 == "off":
                w(f"    skip; d_step {{ qremove({O}); " + P(me, "unlink own pending file") + " };")
            if a.v12 != "off":
                # V12: the listing made after .master_lock (the one T1 and W5 make anyway) decides FIFO:
                # a live pending file older than mine -> remove .master_lock (never granted) and go back
                # to W2.  With tokens, T1 is that same listing.  mutant: no such check.
                older_live = " || ".join(
                    f"(Q[{j}] == {O} && (" + " || ".join(
                        f"(Q[{i}] != 0 && !{deadj(f'Q[{i}]', me, f'stP[Q[{i}] - 1]')})" for i in range(j)) + "))"
                    for j in range(1, NQ)) or "0"
                if a.v12 == "mutant":
                    older_live = "0"
                t1 = (f"hj = {K}; do :: hj > 0 && !T[hj] -> hj-- :: else -> break od; tok = hj; hj = 0; assert(tok >= gmax); "
                      if K else "")
                keep_c = "" if (a.v12 == "lean" and K) else "v12c = 0; "
                w("W12chk:")
                w("    if")
                w(f"    :: d_step {{ v12c && ({older_live}) -> v12c = 0; "
                  + P(me, "V12: listdir after .master_lock: an older live writer is queued: back off") + " };")
                if LM:
                    w("       " + "\n       ".join(unlink_master("V12 back-off", "")) + ";")
                else:
                    w(f"       d_step {{ M = 0; " + P(me, "V12 back-off: unlink .master_lock") + " };")
                w("       goto Wwait")
                w(f"    :: d_step {{ v12c && !({older_live}) -> {keep_c}{t1}"
                  + ("assert(0); " if a.v12_probe == "pass" else "")
                  + (P(me, "V12: listdir after .master_lock: no older live writer; T1: highest .token-k is k = %d", "tok")
                     if K else P(me, "V12: listdir after .master_lock: no older live writer")) + " }"
                  + ("; goto Wt2" if K else ""))
                w("    :: else -> skip")
                w("    fi;")
            w("Wfast:\n    skip;")
            v8_from = len(out)
            t4 = (f"d_step {{ hj = 1; do :: hj < tok -> T[hj] = 0; hj++ :: else -> break od; hj = 0; "
                  + P(me, "T4: unlink every .token-k with k < %d", "tok") + " }")
            if K and a.v14 == "off":
                w("Wtok:\n    skip;")
                w(f"    d_step {{ hj = {K}; do :: hj > 0 && !T[hj] -> hj-- :: else -> break od; tok = hj; hj = 0; "
                  + "assert(tok >= gmax); " + P(me, "T1: highest .token-k is k = %d", "tok") + " };")
                if a.v12 != "off":
                    w("Wt2:\n    skip;")
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
                w(f"    :: d_step {{ tok >= {K} -> " + (f"if :: M == {O} -> M = 0; Mst = 0 :: else fi; " if LM else "M = 0; ")
                  + f"st[{me}] = IDLE; tok = 0; {bitclear_all(me)}; "
                  + (f"ahead[{me}] = 0; " if a.fifo else "") + P(me, "token space of the model exhausted: unlink .master_lock, stop for good") + " }; goto endstop")
                w("    fi;")
                chk = " && ".join(f"!(T[{k}] && {k} > tok)" for k in range(1, K + 1))
                if a.v12 == "lean":
                    # V12 lean: T1 came from a listing made after .master_lock existed: no T3 listing
                    w("    if")
                    w(f"    :: d_step {{ v12c -> v12c = 0; assert(tok > gmax); gmax = tok; "
                      + P(me, "V12: no T3 listing (T1 came after .master_lock): granted token %d", "tok") + " }")
                    w("    :: else ->")
                if a.tok_lost:
                    # two processes may believe they hold the lock (lease): T3 finding a higher token is the
                    # protocol's "lock lost" outcome (fail, remove nothing that is not ours), not an error
                    higher = " || ".join(f"(T[{k}] && {k} > tok)" for k in range(1, K + 1))
                    w("    if")
                    if not LM:
                        w(f"    :: d_step {{ {higher} -> st[{me}] = IDLE; if :: M == {O} -> M = 0 :: else fi; tok = 0; {bitclear_all(me)}; "
                          + (f"ahead[{me}] = 0; " if a.fifo else "") + P(me, "T3: a higher token exists: lock lost, fail") + " }; goto endidle")
                    else:
                        w(f"    :: d_step {{ {higher} -> " + P(me, "T3: a higher token exists: lock lost") + " };")
                        w("       " + "\n       ".join(unlink_master("T3 lost", giveup_tail + "tok = 0; ")) + ";")
                        w("       goto endidle")
                    w(f"    :: d_step {{ !({higher}) -> assert(tok > gmax); gmax = tok; " + P(me, "T3: no higher token: granted token %d", "tok") + " }")
                    w("    fi;")
                else:
                    w(f"    d_step {{ assert({chk}); assert(tok > gmax); gmax = tok; " + P(me, "T3: no higher token: granted token %d", "tok") + " };")
                if a.v12 == "lean":
                    w("    fi;")
                if not a.v3:
                    w(f"    {t4[:-2]}; tok = 0 }};")
            lost = (f"d_step {{ M != {O} -> st[{me}] = IDLE; {bitclear_all(me)}; " + (f"ahead[{me}] = 0; " if a.fifo else "")
                    + P(me, "lock lost: .master_lock is no longer mine") + " }")
            w("Wdrain:")
            if LM:
                # W5 (readers drain), W6 (re-check .master_lock: a step of its own), W7 inside, W8 release
                timeout = unlink_master("timeout in W5", giveup_tail) if gives_up(me) else None
                if a.scan:
                    for k in range(NR * NINC):
                        w(f"    if :: d_step {{ !S[{k}] -> skip }} :: d_step {{ S[{k}] -> skip }}; goto Wdrainw fi;")
                    if a.w6:
                        w("    if")
                        w("    :: " + enter.replace("{cond}", f"M == {O}").replace("{msg}", "W6: .master_lock holds my nonce") + "; goto Wrel")
                        w(f"    :: {lost}; goto endidle")
                        w("    fi;")
                    else:
                        w("    " + enter.replace("{cond}", "true").replace("{msg}", "readdir: no .slave_lock (no W6)") + "; goto Wrel;")
                    w("Wdrainw:")
                    w("    do")
                    w("    :: d_step { nS == 0 -> skip }; goto Wdrain")
                elif a.w6:
                    w("    do")
                    w("    :: d_step { nS == 0 -> " + P(me, "listdir: no .slave_lock") + " }; break")
                else:
                    w("    do")
                    w("    :: " + enter.replace("{cond}", "nS == 0").replace("{msg}", "listdir: no .slave_lock (no W6)") + "; goto Wrel")
                if NR:
                    w(f"    :: d_step {{ {dead_s(me)} -> {gc_s(me)} }}")
                if timeout:
                    if len(timeout) == 1:
                        w(f"    :: {timeout[0]}; goto endidle")
                    else:  # the check is the first step of the timeout's undo
                        w(f"    :: {timeout[1][3:]}")
                        w(f"       {timeout[2]}; goto endidle")
                        w(f"    :: {timeout[3][3:]}; goto endidle")
                w("    od;")
                if a.w6 and not a.scan:
                    w("    if")
                    w("    :: " + enter.replace("{cond}", f"M == {O}").replace("{msg}", "W6: .master_lock holds my nonce"))
                    w(f"    :: {lost}; goto endidle")
                    w("    fi;")
                w("Wrel:")
                if HB:
                    w(f"    if :: d_step {{ !hb[{me}] -> hb[{me}] = 1; if :: M == {O} -> Mst = 0 :: else fi; "
                      + P(me, "heartbeat: touch .master_lock (own fd)") + " } :: skip fi;")
                w(f"    ({leaves[me]});" if me in leaves else "    skip;")
                lazy_token(me, O)
                w("    " + "\n    ".join(unlink_master("W8 release", f"nwcs--; st[{me}] = IDLE; " + (f"hb[{me}] = 0; " if HB else ""),
                                                     checked=True)) + ";")
                w("    goto endidle")
            elif a.scan:
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
            if not LM:
                if NR:
                    w(f"    :: d_step {{ {dead_s(me)} -> {gc_s(me)} }}")
                if gives_up(me):
                    w(f"    :: d_step {{ true -> M = 0; st[{me}] = IDLE; {bitclear_all(me)}; "
                      + (f"ahead[{me}] = 0; " if a.fifo else "") + P(me, "timeout: unlink .master_lock, give up") + " }; goto "
                      + ("Wt4" if K and a.v3 else "endidle"))
                w("    od;")
                w("Wrel:")
                lazy_token(me, O)
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
        if fixed and a.v8 != "off":
            # V8: every way out after .master_lock was created (W5 timeout, T3 or W6 "lost", token space
            # exhausted, W8 release) removes the own pending file last, as a step of its own
            for i in range(v8_from, len(out)):
                out[i] = out[i].replace("goto endidle", "goto Wv8").replace("goto endstop", "goto Wv8s")
            other = f"(Q[0] != 0 && Q[0] != {O}) || Q[1] != 0"
            probe = f"if :: {other} -> assert(0) :: else fi; " if a.v8_probe == "behind" else ""
            for lbl, then in (("Wv8", "endidle"), ("Wv8s", "endstop")):
                w(f"{lbl}:")
                if a.v8 == "keep":   # MUTANT: the pending file stays after the grant (its live owner stops)
                    w("    skip; goto endstop;")
                else:
                    w(f"    skip; d_step {{ {probe}qremove({O}); "
                      + P(me, "V8: unlink own pending file (after .master_lock)") + f" }}; goto {then};")
        w(f"  }} unless {{ {crash_handler(me, False)} }}")
        w("  od;")
        w("endstop: skip")
        w("}")

    def rhold(me, r, SO, SST):
        """V11: the reader process holds its marker SO for two thread slots th[0], th[1]
        (0 out, 1 joined: count + 1, the listing to do, 2 the first of two looks passed
        (scan 1, 2), 3 the listing passed, the marker check to do, 4 inside).  The marker's
        holder count is the number of slots not out.  Slot 0 is inside (it made the marker).
        A slot that is out joins while the other is not out; a failed join or a leave that
        brings the count to 0 unlinks the marker and the process is idle again.  jf: a join
        failed in this hold; no slot starts a join after that (a failed join that leaves the
        count > 0 changes nothing but the joiner's own slot, so no state is lost, and the
        hold then drains: under Spin's weak fairness, which is per process, a slot failing
        its joins forever would otherwise keep the other slot inside forever)."""
        unlink = (f"if :: {SO} -> {SO} = 0; nS--" + (f"; {SST} = 0" if LM else "") + " :: else fi; "
                  + (f"hb[{me}] = 0; " if HB else ""))
        w("Rhold:")
        w("    do")
        for i in (0, 1):
            o = 1 - i
            J = f"owj[{2 * r + i}]"
            owe_reset = f"{J} = 0; " if a.prio else ""

            def fail(state, cond, why):
                w(f"    :: d_step {{ th[{i}] == {state} && !({cond}) && th[{o}] != 0 -> th[{i}] = 0; jf = 1; {owe_reset}"
                  + P(me, f"V11 thread {i}: {why}: join fails, count - 1 > 0 (the marker stays)") + " }")
                w(f"    :: d_step {{ th[{i}] == {state} && !({cond}) && th[{o}] == 0 -> th[{i}] = 0; jf = 0; {owe_reset}"
                  f"st[{me}] = IDLE; {unlink}"
                  + P(me, f"V11 thread {i}: {why}: join fails, count 0: unlink own .slave_lock") + " }; goto endidle")
            w(f"    :: d_step {{ th[{i}] == 0 && th[{o}] != 0 && !jf -> th[{i}] = 1; "
              + (f"{J} = {live_writer_mask()}; " if a.prio else "")
              + P(me, f"V11 thread {i}: the process's marker has count > 0: count + 1 (join)") + " }")
            if a.v11_mutant:   # MUTANT: the join does not list the directory
                w(f"    :: d_step {{ th[{i}] == 1 -> th[{i}] = 3; " + P(me, f"V11 MUTANT thread {i}: no listing") + " }")
            elif a.scan == 0:
                w(f"    :: d_step {{ th[{i}] == 1 && M == 0 && Q[0] == 0 -> th[{i}] = 3; "
                  + P(me, f"V11 thread {i}: listdir: no .master_lock, no pending") + " }")
                fail(1, "M == 0 && Q[0] == 0", "listdir: .master_lock or pending present")
            else:
                first, second = (("Q[0] == 0", "readdir: no pending"), ("M == 0", "lstat .master_lock: ENOENT"))
                if a.scan == 2:
                    first, second = second, first
                w(f"    :: d_step {{ th[{i}] == 1 && {first[0]} -> th[{i}] = 2; " + P(me, f"V11 thread {i}: {first[1]}") + " }")
                fail(1, first[0], "first look: a writer's file present")
                w(f"    :: d_step {{ th[{i}] == 2 && {second[0]} -> th[{i}] = 3; " + P(me, f"V11 thread {i}: {second[1]}") + " }")
                fail(2, second[0], "second look: a writer's file present")
            w(f"    :: d_step {{ th[{i}] == 3 && {SO} -> "
              + ("assert(nwcs == 0); " if a.mutex and not a.ww_only else "")
              + (f"assert({J} == 0); " if a.prio else "")
              + ("assert(0); " if a.v11_probe == "join" else "")
              + f"th[{i}] = 4; nrcs++; "
              + P(me, f"V11 thread {i}: fstatat own .slave_lock: still there: ENTER (read, shared marker)") + " }")
            fail(3, SO, "fstatat own .slave_lock: gone")
            w(f"    :: d_step {{ th[{i}] == 4 && th[{o}] != 0 -> th[{i}] = 0; nrcs--; "
              + P(me, f"V11 thread {i}: leave, count - 1 > 0 (the marker stays)") + " }")
            w(f"    :: d_step {{ th[{i}] == 4 && th[{o}] == 0 -> th[{i}] = 0; nrcs--; jf = 0; st[{me}] = IDLE; {unlink}"
              + P(me, f"V11 thread {i}: leave, count 0: unlink own .slave_lock") + " }; goto endidle")
        w("    od")

    # ----------------------------------------------------------- readers
    for me in range(NW, NP):
        r = me - NW
        SO = f"S[{idx(me, NW)}]"
        enter = (f"d_step {{ {{cond}} -> " + ("assert(nwcs == 0); " if a.mutex and not a.ww_only else "")
                 + (f"assert(owe[{r}] == 0); " if a.prio else "")
                 + ("v7 = 1; " if fixed and a.v7 != "off" else "")
                 + f"nrcs++; st[{me}] = CS; " + P(me, "{msg}: ENTER (read)") + " }")
        SST = f"stS[{idx(me, NW)}]"
        release = (f"d_step {{ {leaves[me] + ' -> ' if me in leaves else ''}nrcs--; st[{me}] = IDLE; {SO} = 0; nS--; {clr(SST)}" + (f"hb[{me}] = 0; " if HB else "")
                   + P(me, "leave; unlink own .slave_lock") + " }")
        if HB:  # variant old: the heartbeat refreshes the marker only once the reader is inside
            release = (f"if :: d_step {{ !hb[{me}] -> hb[{me}] = 1; {SST} = 0; " + P(me, "heartbeat: touch .slave_lock (own fd)")
                       + " } :: skip fi; " + release)
        # V11: the ENTER of the thread that made the marker (slot 0); the hold loop (Rhold) follows
        enter0 = enter.replace("nrcs++; ", "th[0] = 4; nrcs++; ") if a.v11 else enter
        w(f"\nactive proctype {name(me)}() {{")
        w("  " + locals_(True))
        w("endidle:\n  do\n  :: {")
        w(f"    {'' if start_guard(me) else 'skip; '}d_step {{ {start_guard(me) or 'true -> '}st[{me}] = TRY; " + (f"owe[{r}] = {live_writer_mask()}; " if a.prio else "")
          + ("v1 = 0; " if fixed and a.v1 in ("wake", "armed") else "") + ("v10 = 0; " if fixed and a.v10 else "")
          + P(me, "start read attempt") + " };")
        if fixed:
            w("Rwait:")
            w("    do")
            w(f"    :: d_step {{ M == 0 && Q[0] == 0 -> " + P(me, "listdir: no .master_lock, no pending") + " }; break")
            if a.v1 in ("wake", "armed"):
                live_m = f" && !{deadj('M', me, 'Mst')}" if a.v1 == "armed" else ""   # a listing that shows a dead master breaks it (R1)
                w(f"    :: d_step {{ !v1 && M != 0{live_m} && Q[0] == 0 -> v1 = 1; "
                  + P(me, "listdir: .master_lock present, no pending: sleep (V1 armed)") + " }")
                own_only = "Q[0] == M && M != 0 && Q[1] == 0"   # V9: the only pending file is the holder's own
                if a.v9 != "off":
                    w(f"    :: d_step {{ !v1 && M != 0{live_m} && {own_only} -> v1 = 1; "
                      + ("assert(0); " if a.v9_probe == "reader" else "")
                      + P(me, "listdir: .master_lock present, the only pending file is its holder's: sleep (V1 armed, V9)") + " }")
                    w(f"    :: d_step {{ v1 && Q[0] != 0 && !({own_only}) -> v1 = 0; "
                      + P(me, "listdir: a pending file is present (V1 disarmed)") + " }")
                else:
                    w(f"    :: d_step {{ v1 && Q[0] != 0 -> v1 = 0; "
                      + P(me, "listdir: a pending file is present (V1 disarmed)") + " }")
                if a.v1 == "wake":
                    w(f"    :: d_step {{ v1 && M == 0 -> v1 = 0; "
                      + P(me, "woken: .master_lock removed; V1 skips R1's listing") + " }; break")
                else:
                    w(f"    :: d_step {{ v1 -> v1 = 0; "
                      + P(me, "woken (any reason); V1 skips R1's listing") + " }; break")
            if a.v10:
                # V10: a reader behind queued writers waits for the youngest one's pending file; woken by
                # its removal, it skips R1's listing (announces at once) as V1 does for .master_lock
                inq10 = " || ".join(f"Q[{j}] == v10" for j in range(NQ))
                w(f"    :: d_step {{ v10 == 0 && Q[0] != 0 -> v10i = {NQ - 1}; "
                  f"do :: v10i > 0 && Q[v10i] == 0 -> v10i-- :: else -> break od; v10 = Q[v10i]; v10i = 0; "
                  + ("assert(0); " if a.v10_probe == "arm" else "")
                  + P(me, "listdir: pending file(s): sleep on the youngest (V10 armed)") + " }")
                # a look while armed changes nothing unless a younger writer queued since: the reader
                # then waits for that one's file instead
                younger = " || ".join(f"(Q[{j}] == v10 && Q[{j + 1}] != 0)" for j in range(NQ - 1)) or "0"
                w(f"    :: d_step {{ v10 != 0 && ({younger}) -> v10 = 0; "
                  + P(me, "a look: a younger writer queued since (V10 disarmed, to wait for its file)") + " }")
                w(f"    :: d_step {{ v10 != 0 && !({inq10}) -> v10 = 0; " + ("assert(0); " if a.v10_probe == "skip" else "")
                  + P(me, "woken: the pending file waited for is gone; V10 skips R1's listing") + " }; break")
            if a.v1 == "loose":
                w(f"    :: d_step {{ true -> " + P(me, "V1 (loose): skip R1 entirely") + " }; break")
            if a.v7 == "on":
                w(f"    :: d_step {{ v7 -> " + ("assert(0); " if a.v7_probe == "skip" else "")
                  + P(me, "V7: skip R1 (this reader's last R3 found no .master_lock and no pending file)") + " }; break")
            elif a.v7 == "mutant":
                w(f"    :: d_step {{ true -> " + P(me, "V7 mutant: skip R1 whatever the last R3 found") + " }; break")
            if brk != "none":
                w(f"    :: {dead_master_guard(me)};")
                w(break_master(me, "Rb"))
            if NW:
                w(f"    :: d_step {{ {dead_q(me)} -> {gcq(me)} }}")
            if gives_up(me):
                w(f"    :: d_step {{ true -> st[{me}] = IDLE; " + (f"owe[{r}] = 0; " if a.prio else "")
                  + P(me, "timeout: give up") + " }; goto endidle")
            w("    od;")
            w(f"    skip; d_step {{ {SO} = 1; nS++; {clr(SST)}" + P(me, "create .slave_lock (announce)") + " };")
            if a.scan == 0:
                w("    if")
                if a.v11:
                    w("    :: " + enter0.replace("{cond}", "M == 0 && Q[0] == 0").replace("{msg}", "listdir: no .master_lock, no pending") + "; goto Rhold")
                else:
                    w("    :: " + enter.replace("{cond}", "M == 0 && Q[0] == 0").replace("{msg}", "listdir: no .master_lock, no pending") + ";")
                    w("       " + release + "; goto endidle")
                w(f"    :: d_step {{ !(M == 0 && Q[0] == 0) -> " + P(me, "listdir: .master_lock or pending present") + " }")
                w("    fi;")
            else:
                first, second = (("Q[0] == 0", "readdir: no pending"), ("M == 0", "lstat .master_lock: ENOENT"))
                if a.scan == 2:
                    first, second = second, first
                w(f"    if :: d_step {{ {first[0]} -> " + P(me, first[1]) + " }")
                if a.v11:
                    w(f"       if :: {enter0.replace('{cond}', second[0]).replace('{msg}', second[1])}; goto Rhold")
                else:
                    w(f"       if :: {enter.replace('{cond}', second[0]).replace('{msg}', second[1])};")
                    w(f"             {release}; goto endidle")
                w(f"          :: d_step {{ !({second[0]}) -> skip }}")
                w("       fi")
                w(f"    :: d_step {{ !({first[0]}) -> skip }}")
                w("    fi;")
            w(f"    d_step {{ {SO} = 0; nS--; {clr(SST)}" + ("v7 = 0; " if a.v7 != "off" else "")
              + P(me, "back off: unlink own .slave_lock") + " };")
            w("    goto Rwait")
            if a.v11:
                rhold(me, r, SO, SST)
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

    # ----------------------------------------------------------- leases
    if LM:
        def may(p, c):
            """May the lease of a file of process p, incarnation c, expire now?"""
            dead = None if NINC == 1 else f"inc[{p}] != {c}"
            if REF == "pause":      # an owner may be paused longer than its lease: any file, any time
                return "1"
            if REF == "cs":         # variant old: refreshed only once the owner is inside (hb)
                return f"(!hb[{p}] || {dead})" if dead else f"!hb[{p}]"
            return dead             # refreshed from creation to removal: only a crashed owner's files

        def nm(p, c):
            return f"P{p}.{c}"

        lines = []
        judged = lambda p, judges: any(not same(p, q) for q in judges)
        for p in range(NW):
            if not judged(p, range(NP)):
                continue
            for c in range(NINC):
                m = may(p, c)
                if m is None:
                    continue
                o = p * NINC + c + 1
                lines.append(f"  :: d_step {{ M == {o} && !Mst && {m} -> Mst = 1; "
                             f'printf("@ lease | .master_lock of {nm(p, c)} goes stale\\n") }}')
                inq = " || ".join(f"Q[{j}] == {o}" for j in range(NQ))
                lines.append(f"  :: d_step {{ ({inq}) && !stP[{o - 1}] && {m} -> stP[{o - 1}] = 1; "
                             f'printf("@ lease | .pending_lock of {nm(p, c)} goes stale\\n") }}')
        for k in range(NR * NINC):
            p, c = s_owner(k)
            m = may(p, c)
            if m is None or not judged(p, range(NW)):
                continue
            lines.append(f"  :: d_step {{ S[{k}] && !stS[{k}] && {m} -> stS[{k}] = 1; "
                         f'printf("@ lease | .slave_lock of {nm(p, c)} goes stale\\n") }}')
        if brk == "excl":
            for k in range(NBK):
                p, c = bk_owner(k)
                m = may(p, c)
                if m is None or not judged(p, range(NP)):
                    continue
                lines.append(f"  :: d_step {{ BK[{k}] && !stB[{k}] && {m} -> stB[{k}] = 1; "
                             f'printf("@ lease | .break marker of {nm(p, c)} goes stale\\n") }}')
        if lines:
            w("\n/* a lease expires: a file that its owner does not keep fresh goes stale (any step) */")
            w("active proctype Lease() {\nend:\n  do")
            for ln in lines:
                w(ln)
            w("  od\n}")

    # ----------------------------------------------------------- LTL
    wl = " && ".join(f"[] ((st[{p}] == TRY) -> <> (st[{p}] != TRY))" for p in range(NW)) or "true"
    quiet = " && ".join(f"st[{p}] == IDLE" for p in range(NW)) or "true"
    rl = " && ".join(f"[] ((st[{p}] == TRY) -> <> (st[{p}] != TRY))" for p in range(NW, NP)) or "true"
    w(f"\nltl wlive {{ {wl} }}")
    w(f"ltl rlive {{ (<> [] ({quiet})) -> ({rl}) }}")
    return "\n".join(out) + "\n"


PRESETS = {  # refresh, touch at grant, W6, unlink of .master_lock on W5 timeout / T3 lost
    "old": ("cs", False, False, "blind"),
    "fixed": ("create", True, True, "checked"),
    "pause": ("pause", True, True, "checked"),
}


def resolve_leases(ap, a):
    np_ = a.nw + a.nr
    if a.ns:
        try:
            a.nsl = [int(x) for x in a.ns.split(",")]
        except ValueError:
            ap.error("--ns takes integers, e.g. 0,1,0")
        if len(a.nsl) != np_:
            ap.error(f"--ns needs {np_} entries (writers, then readers)")
    else:
        a.nsl = list(range(np_)) if a.lease else [0] * np_
    a.lm = len(set(a.nsl)) > 1
    if a.variant is None:
        a.variant = "pause" if a.lease else "fixed"
    ref, tg, w6, ul = PRESETS[a.variant]
    a.refresh = a.refresh or ref
    a.touch_grant = tg if a.touch_grant is None else a.touch_grant
    a.w6 = w6 if a.w6 is None else a.w6
    a.unlink = a.unlink or ul
    if a.lm and (a.proto != "fixed" or a.brk != "excl"):
        ap.error("leases (--ns, --lease) are modelled for --proto fixed --break excl only")
    if a.lm and a.v3:
        ap.error("--v3 is not modelled with leases")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nw", type=int, default=2)
    ap.add_argument("--nr", type=int, default=2)
    ap.add_argument("--crash", type=int, default=1, help="crash budget (crashed processes restart)")
    ap.add_argument("--proto", choices=["orig", "fixed"], default="fixed")
    ap.add_argument("--break", dest="brk", choices=["none", "naive", "tomb", "excl"], default="excl")
    ap.add_argument("--lease", action="store_true",
                    help="shorthand: every process in its own namespace (unless --ns) and --variant pause "
                         "(unless --variant): any file may go stale at any time, as when its owner is paused")
    ap.add_argument("--ns", default="",
                    help="namespace of each process, comma-separated, writers first then readers (e.g. 0,1,0). "
                         "Same namespace: judgement is exact (dead iff crashed); other namespace: a lease "
                         "(dead iff the file is stale). Default: all in one namespace (no leases)")
    ap.add_argument("--variant", choices=["old", "fixed", "pause"], default=None,
                    help="with leases (--ns with two namespaces, or --lease): old = the released code "
                         "(refresh only inside, no touch at the grant, no W6, unchecked unlink of .master_lock "
                         "on timeout and T3 lost); fixed = refresh from creation to removal, touch at the grant, "
                         "W6, checked unlinks; pause = fixed, but an owner may be paused longer than its lease, "
                         "so any file may go stale at any time. Default: fixed (pause with --lease)")
    ap.add_argument("--refresh", choices=["create", "cs", "pause"], default=None,
                    help="override the variant: which live owner's files may go stale. create: none (refreshed "
                         "from creation); cs: those of an owner not yet inside or inside before its first "
                         "heartbeat; pause: all")
    ap.add_argument("--touch-grant", dest="touch_grant", action="store_true", default=None,
                    help="override the variant: the writer touches .master_lock at the grant (and its heartbeat runs from then on)")
    ap.add_argument("--no-touch-grant", dest="touch_grant", action="store_false")
    ap.add_argument("--w6", dest="w6", action="store_true", default=None,
                    help="override the variant: W6 (re-check that .master_lock holds our nonce before entering)")
    ap.add_argument("--no-w6", dest="w6", action="store_false")
    ap.add_argument("--unlink", choices=["blind", "checked"], default=None,
                    help="override the variant: how W5 timeout and T3 lost remove .master_lock")
    ap.add_argument("--no-own-entry", dest="own_entry", action="store_false",
                    help="with leases: do not assert that an entering writer's .master_lock is its own")
    ap.add_argument("--no-own-unlink", dest="own_unlink", action="store_false",
                    help="with leases: do not assert that an owner's unlink of .master_lock removes its own file")
    ap.add_argument("--skew", action="store_true", help="a new pending file may sort before existing ones")
    ap.add_argument("--giveup", action="store_true", help="waiting processes may time out")
    ap.add_argument("--scan", type=int, default=0, choices=[0, 1, 2],
                    help="0: listdir is a snapshot; 1: entries read one at a time, reader reads pending "
                         "then .master_lock; 2: reader reads .master_lock first")
    ap.add_argument("--giveup-only", default="", metavar="P,...",
                    help="like --giveup, but only the processes named (e.g. W0)")
    ap.add_argument("--stop", action="store_true", help="writers may stop for good (for reader liveness)")
    ap.add_argument("--no-prio", dest="prio", action="store_false")
    ap.add_argument("--no-mutex", dest="mutex", action="store_false")
    ap.add_argument("--ww-only", action="store_true",
                    help="assert mutual exclusion between writers only (isolates two-writer counterexamples)")
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
    ap.add_argument("--v5", action="store_true",
                    help="variant V5 (writer's W2 judges only older pending files): walking from its own queue "
                         "position towards the head, a writer removes the pending files judged dead and stops at the "
                         "first live one; younger files and files older than that live one are left to others "
                         "(readers' R1, the writers behind them). Replaces W2's removal of every dead pending file")
    ap.add_argument("--v5-probe", choices=["off", "skip", "stop"], default="off",
                    help="reachability probe for --v5: assert(0) where a writer in W2 sees a dead pending file that "
                         "V5 does not remove (skip), or where V5's walk stops at a live file with a dead one older "
                         "than it (stop)")
    ap.add_argument("--v6", action="store_true",
                    help="variant V6 (writer fast path): a writer whose first listing shows no .master_lock and no "
                         "pending file creates .master_lock directly, without a pending file; on EEXIST it queues "
                         "a pending file as in W1 and goes on with W2")
    ap.add_argument("--v6-probe", choices=["off", "ok", "eexist"], default="off",
                    help="reachability probe for --v6: assert(0) where the fast path's create succeeds (ok) or "
                         "meets EEXIST (eexist)")
    ap.add_argument("--v6-mutant", choices=["off", "nolook"], default="off",
                    help="sanity mutation of V6: nolook = the fast path does not look for pending files "
                         "(FIFO must fail)")
    ap.add_argument("--v7", choices=["off", "on", "mutant"], default="off",
                    help="variant V7 (reader fast path): a reader whose last R3 listing found no .master_lock and no "
                         "pending file (it entered) skips R1 in its next attempt and announces at once; R3 decides as "
                         "before, and a failed R3 clears the hint (back to R1). mutant: a reader may skip R1 whatever "
                         "its last R3 found (the same as --v1 loose)")
    ap.add_argument("--v7-probe", choices=["off", "skip"], default="off",
                    help="reachability probe for --v7: assert(0) where a reader skips R1")
    ap.add_argument("--v8", choices=["off", "on", "keep"], default="off",
                    help="variant V8 (one wake-up per grant): a writer keeps its pending file while it holds "
                         ".master_lock and removes it only after .master_lock, on every way out (release, W5 "
                         "timeout, lost); the writer behind it, which waits for that file, wakes once per grant. "
                         "keep: MUTANT, the pending file stays after the grant, its live owner never comes back (liveness "
                         "must fail)")
    ap.add_argument("--v8-probe", choices=["off", "behind"], default="off",
                    help="reachability probe for --v8: assert(0) where a writer removes its pending file after "
                         "its grant while another pending file exists (a writer queued behind a holder's file)")
    ap.add_argument("--v9", choices=["off", "on", "mutant"], default="off",
                    help="variant V9 (with --v8 and --v2): a queued writer whose listing shows .master_lock and, as "
                         "the only pending file older than its own, the holder's own (V8 keeps it), arms V2: woken by "
                         "the removal of .master_lock it creates its own without a listing; with --v1 wake, a reader "
                         "whose listing shows .master_lock and only the holder's pending file arms V1. mutant: a writer "
                         "arms behind any "
                         "writer, holder or not (FIFO must fail)")
    ap.add_argument("--v9-probe", choices=["off", "arm", "reader"], default="off",
                    help="reachability probe for --v9: assert(0) where V9 arms for a writer (arm) or, with --v1 wake, "
                         "for a reader (reader)")
    ap.add_argument("--v12", choices=["off", "on", "lean", "mutant"], default="off",
                    help="variant V12 (with --v8 on and --v2): a queued writer whose listing shows a live pending "
                         "file just older than its own sleeps on it; woken by its removal, it creates .master_lock "
                         "without a listing, and the listing after it (T1's, W5's first) decides FIFO: an older live "
                         "pending file makes it remove .master_lock and go back to W2. lean: and no T3 listing on "
                         "that path (T1 came after .master_lock). mutant: no FIFO check (FIFO must fail)")
    ap.add_argument("--v12-probe", choices=["off", "arm", "woken", "pass"], default="off",
                    help="reachability probe for --v12: assert(0) where V12 arms, where a woken writer creates "
                         ".master_lock, or where its check passes")
    ap.add_argument("--v13", choices=["off", "on", "mutant"], default="off",
                    help="variant V13 (W2): a writer judges (and breaks) .master_lock only when no live pending "
                         "file stands between its own and the head of the queue (it is the first live queued writer, "
                         "or the one right behind the head). mutant: no writer judges .master_lock (liveness must "
                         "fail without readers)")
    ap.add_argument("--v13-probe", choices=["off", "skip"], default="off",
                    help="reachability probe for --v13: assert(0) where a writer finds a dead .master_lock that V13 "
                         "leaves to the writers ahead of it")
    ap.add_argument("--v10", action="store_true",
                    help="variant V10: a reader that waits behind queued writers (for the youngest one's pending "
                         "file) and is woken by that file's removal skips R1's listing and announces at once; R3 "
                         "decides as before")
    ap.add_argument("--v10-probe", choices=["off", "arm", "skip"], default="off",
                    help="reachability probe for --v10: assert(0) where V10 arms, or where it skips R1")
    ap.add_argument("--v11", action="store_true",
                    help="variant V11: threads of one reader process share its marker. After its ENTER a reader "
                         "process holds its .slave_lock for two thread slots; a slot that is out joins while the "
                         "other is not out (holder count > 0): count + 1, list the directory as R3 does, check "
                         "that the marker is still there, enter; a failed join decrements the count and, at 0, "
                         "unlinks the marker; the slot that brings the count to 0 by leaving unlinks it")
    ap.add_argument("--v11-probe", choices=["off", "join"], default="off",
                    help="reachability probe for --v11: assert(0) where a join succeeds")
    ap.add_argument("--v11-mutant", action="store_true",
                    help="sanity mutation of --v11: the join skips the listing (writer priority must fail)")
    ap.add_argument("--tokens", type=int, default=0, metavar="K",
                    help="model the fencing token (§3.7) with token numbers 1..K; a writer that finds .token-K "
                         "releases and stops for good (bounds the number of write grants)")
    ap.add_argument("--v14", choices=["off", "on", "nocheck"], default="off",
                    help="variant V14 (lazy fencing token): no W4 before the grant; a holder allocates its token "
                         "(T1-T3, then W6's ownership check, then T4) only if it asks, while inside. "
                         "nocheck: a mutant without the ownership check")
    ap.add_argument("--v14-probe", choices=["off", "handout"], default="off",
                    help="assert(0) at a V14 hand-out, to show that it is reached")
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
    ap.add_argument("--once", action="store_true",
                    help="scenario: each process makes a single attempt (read or write), then stays idle")
    ap.add_argument("--gate", action="append", default=[], metavar="P=COND",
                    help="scenario: process P (W0, R1, ...) starts its attempt only when COND holds; COND combines "
                         "inside(P), waiting(P), holds(P) (.master_lock is P's), done(P) (needs --once), "
                         "beating(P) (P's heartbeat has refreshed its files; variant old) with "
                         "&&, ||, !; e.g. W1=holds(W0). Repeatable")
    ap.add_argument("--leave", action="append", default=[], metavar="P=COND",
                    help="scenario: process P leaves its critical section only when COND holds (as in --gate)")
    ap.add_argument("-o", "--out", default="-")
    a = ap.parse_args()
    resolve_leases(ap, a)
    if a.v14 != "off" and (not a.tokens or a.v12 != "off"):
        ap.error("--v14 needs --tokens and cannot be combined with --v12")
    if (a.v4 or a.tok_lost) and not a.tokens:
        ap.error("--v4 and --tok-lost need --tokens K")
    if a.v5_probe != "off" and not a.v5:
        ap.error("--v5-probe needs --v5")
    if (a.v6_probe != "off" or a.v6_mutant != "off") and not a.v6:
        ap.error("--v6-probe/--v6-mutant need --v6")
    if a.v7_probe != "off" and a.v7 != "on":
        ap.error("--v7-probe needs --v7 on")
    if a.v8_probe != "off" and a.v8 != "on":
        ap.error("--v8-probe needs --v8 on")
    if a.v10_probe != "off" and not a.v10:
        ap.error("--v10-probe needs --v10")
    if (a.v11_probe != "off" or a.v11_mutant) and not a.v11:
        ap.error("--v11-probe/--v11-mutant need --v11")
    if a.v11 and (a.proto != "fixed" or a.once or a.gate or a.leave):
        ap.error("--v11 needs --proto fixed and no scenario options (--once, --gate, --leave)")
    if a.v10 and a.proto != "fixed":
        ap.error("--v10 needs --proto fixed")
    if a.v12 != "off" and (a.v8 != "on" or not a.v2 or a.proto != "fixed"):
        ap.error("--v12 needs --v8 on and --v2")
    if a.v13 != "off" and a.proto != "fixed":
        ap.error("--v13 needs --proto fixed")
    if a.v13_probe != "off" and a.v13 != "on":
        ap.error("--v13-probe needs --v13 on")
    if a.v12_probe != "off" and a.v12 == "off":
        ap.error("--v12-probe needs --v12")
    if a.v9 != "off" and (a.v8 != "on" or not a.v2):
        ap.error("--v9 needs --v8 on and --v2")
    if a.v9_probe != "off" and a.v9 != "on":
        ap.error("--v9-probe needs --v9 on")
    if a.v8 != "off" and a.proto != "fixed":
        ap.error("--v8 needs --proto fixed")
    if a.v7 != "off" and a.proto != "fixed":
        ap.error("--v7 needs --proto fixed")
    if a.v6 and a.proto != "fixed":
        ap.error("--v6 needs --proto fixed")
    if a.v5 and a.proto != "fixed":
        ap.error("--v5 needs --proto fixed")
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
