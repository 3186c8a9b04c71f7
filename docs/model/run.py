#!/usr/bin/env python3
"""Run every model-checking configuration of the rwdir protocol models with Spin.

Usage: python3 run.py [--quick] [--only ID[,ID...]] [--keep]
Writes results/summary.md and results/<ID>.trace.txt (counterexamples) next
to this script.  Build files go to a temporary directory (removed unless --keep).
Needs: spin, a C compiler (cc), python3.  Total run time about 4-5 minutes,
peak memory about 1.2 GB (--quick: under a minute).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RES = os.path.join(HERE, "results")   # --tag T: results/variants/T
EXTRA = ""                            # --gen ARGS: appended to every configuration's generator options

# (id, title, generator args, mode, expected, big)
#   mode: "safety" (assertions + invalid end states), "safety-noassert" (only
#   invalid end states), "bfs" (safety, breadth-first: shortest counterexample),
#   "ltl:<name>" (LTL property under weak fairness)
CONFIGS = [
    # ---- the original GlobalDirectoryLock protocol
    ("O1", "original: reader check-then-create vs writer (2W+2R)",
     "--proto orig --nw 2 --nr 2 --crash 0", "bfs", "FAIL", False),
    ("O2", "original: two writers, per-writer master names, ns read before create (2W)",
     "--proto orig --nw 2 --nr 0 --crash 0 --skew", "bfs", "FAIL", False),
    ("O2f", "original: two writers, ns = creation order (2W)",
     "--proto orig --nw 2 --nr 0 --crash 0", "bfs", "PASS", False),
    ("O3", "original: a crash leaves its file forever (1W+1R, 1 crash, deadlock only)",
     "--proto orig --nw 1 --nr 1 --crash 1", "bfs-noassert", "FAIL", False),
    # ---- corrected protocol, but with unsafe or missing stale breaking
    ("B0", "corrected, no stale breaking (2W+2R, 1 crash)",
     "--nw 2 --nr 2 --crash 1 --break none", "bfs", "FAIL", False),
    ("B1", "corrected, naive breaking: read owner, unlink (2W+2R, 1 crash)",
     "--nw 2 --nr 2 --crash 1 --break naive", "bfs", "FAIL", False),
    ("B2r", "corrected, tombstone breaking: rename, verify, link back (2W+2R, 1 crash)",
     "--nw 2 --nr 2 --crash 1 --break tomb --no-prio", "bfs", "FAIL", False),
    ("B2w", "corrected, tombstone breaking, writer in the window (2W+1R, 1 crash)",
     "--nw 2 --nr 1 --crash 1 --break tomb --no-prio", "bfs", "FAIL", False),
    # ---- corrected protocol with exclusive breaking: all must pass
    ("F1", "corrected: 2W+2R, 1 crash, any ns order, timeouts",
     "--nw 2 --nr 2 --crash 1 --skew --giveup", "safety", "PASS", False),
    ("F2", "corrected: 2W+2R, 2 crashes",
     "--nw 2 --nr 2 --crash 2", "safety", "PASS", True),
    ("F3", "corrected: 2W+1R, 2 crashes, any ns order, timeouts",
     "--nw 2 --nr 1 --crash 2 --skew --giveup", "safety", "PASS", False),
    ("F4", "corrected: 2W+3R, 1 crash",
     "--nw 2 --nr 3 --crash 1", "safety", "PASS", True),
    ("F5", "corrected: readdir not atomic (one entry per step), pending then master; 2W+2R, 1 crash, any ns order, timeouts",
     "--nw 2 --nr 2 --crash 1 --scan 1 --skew --giveup", "safety", "PASS", True),
    ("F6", "corrected: readdir not atomic, master then pending; 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1 --scan 2", "safety", "PASS", False),
    ("F7", "corrected: writer FIFO (ns = creation order); 2W+2R, 1 crash, timeouts",
     "--nw 2 --nr 2 --crash 1 --fifo --giveup", "safety", "PASS", False),
    ("F8", "corrected: writer FIFO; 3W+1R, 1 crash",
     "--nw 3 --nr 1 --crash 1 --fifo", "safety", "PASS", False),
    ("L1", "corrected: every waiting writer eventually enters (weak fairness); 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1", "ltl:wlive", "PASS", False),
    ("L2", "corrected: a waiting reader enters once writers stop (weak fairness); 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1 --stop", "ltl:rlive", "PASS", False),
    ("L3", "corrected: writer liveness; 3W+1R, 1 crash",
     "--nw 3 --nr 1 --crash 1", "ltl:wlive", "PASS", False),
    ("L4", "corrected: writer liveness; 2W+1R, 2 crashes",
     "--nw 2 --nr 1 --crash 2", "ltl:wlive", "PASS", False),
    ("X1", "corrected, unbounded ns skew: a writer can be overtaken forever (2W+1R)",
     "--nw 2 --nr 1 --crash 0 --skew", "ltl:wlive", "FAIL", False),
    # ---- lease-based liveness judgement (a live but slow owner may be judged dead)
    ("E1", "lease: a slow reader's .slave_lock is removed, a writer enters (1W+1R)",
     "--nw 1 --nr 1 --crash 0 --lease --no-prio", "bfs", "FAIL", False),
    ("E2", "lease: a slow writer's .master_lock is broken, a second writer enters (2W)",
     "--nw 2 --nr 0 --crash 0 --lease --no-prio --no-victim", "bfs", "FAIL", False),
    ("E3", "lease: the breaker unlinks the successor's .master_lock (3W, mutex assertion off)",
     "--nw 3 --nr 0 --crash 0 --lease --no-prio --no-mutex", "bfs", "FAIL", False),
]


def sh(cmd, cwd, timeout=900):
    t = time.time()
    p = subprocess.run(cmd, cwd=cwd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, time.time() - t


def names(nw):
    def f(m):
        pid, c = int(m.group(1)), int(m.group(2))
        n = f"W{pid}" if pid < nw else f"R{pid - nw}"
        return n + "'" * c
    return f


def run_one(cfg, work):
    cid, title, gargs, mode, expected, _ = cfg
    d = os.path.join(work, cid)
    os.makedirs(d, exist_ok=True)
    nw = int(re.search(r"--nw (\d+)", gargs).group(1))
    if EXTRA:
        gargs = f"{gargs} {EXTRA}"
    rc, out, _ = sh(f"{sys.executable} {os.path.join(HERE, 'gen_model.py')} {gargs} -o model.pml", d)
    if rc:
        return dict(id=cid, result="ERROR", note=out[-500:])
    rc, out, _ = sh("spin -a model.pml", d)
    if rc or not os.path.exists(os.path.join(d, "pan.c")):
        return dict(id=cid, result="ERROR", note=out[-500:])
    cflags = "-O2 -w -DMEMLIM=6000"
    runflags = "-m2000000"
    if mode.startswith("ltl:"):
        cflags += " -DCOLLAPSE"
        runflags += f" -a -f -N {mode[4:]}"
    elif mode.startswith("bfs"):
        cflags += " -DSAFETY -DNOCLAIM -DBFS"
        if mode == "bfs-noassert":
            runflags += " -A"
    else:
        cflags += " -DSAFETY -DNOCLAIM -DCOLLAPSE"
    rc, out, _ = sh(f"cc {cflags} -o pan pan.c", d)
    if rc:
        return dict(id=cid, result="ERROR", note=out[-500:])
    rc, out, secs = sh(f"./pan {runflags}", d)
    errors = re.search(r"errors: (\d+)", out)
    stored = re.search(r"([\d.e+]+) states, stored", out)
    depth = re.search(r"depth reached (\d+)", out)
    kind = re.search(r"pan:1: (.*?) \(at depth", out)
    # a search cut short (depth, memory, -DMEMLIM bound) proves nothing: never a PASS
    trunc = ("max search depth too small" in out or "out of memory" in out.lower()
             or "search not completed" in out.lower() or "reached -dmemlim bound" in out.lower())
    res = dict(id=cid, title=title, args=gargs, mode=mode, expected=expected,
               states=int(float(stored.group(1))) if stored else None,
               depth=int(depth.group(1)) if depth else None, secs=round(secs, 1),
               errors=int(errors.group(1)) if errors else None, kind=kind.group(1) if kind else "",
               trunc=trunc)
    # a counterexample is definite (pan always says "Search not completed" after one);
    # a search cut short without one proves nothing: INCOMPLETE, never a PASS
    if res["errors"] is None:
        res["result"] = "ERROR"
    elif res["errors"]:
        res["result"] = "FAIL"
    else:
        res["result"] = "INCOMPLETE" if trunc else "PASS"
    with open(os.path.join(d, "pan.out"), "w") as f:
        f.write(out)
    trail = os.path.join(d, "model.pml.trail")
    if os.path.exists(trail):
        rc, tout, _ = sh("spin -t -T model.pml", d)
        lines, held = [], None
        for ln in tout.splitlines():
            if ln.startswith("@ "):
                lines.append(re.sub(r"P(\d+)\.(\d+)", names(nw), ln[2:]))
                if held:  # spin reports the assertion before the step's own printf
                    lines.append(held)
                    held = None
            elif "START OF CYCLE" in ln:
                lines.append("----- the following steps repeat forever -----")
            elif "text of failed assertion" in ln:
                held = "VIOLATED: " + ln.split("text of failed assertion:")[1].strip()
        if held:
            lines.append(held)
        if res["kind"] == "invalid end state":
            lines.append("DEADLOCK: every process is blocked, some not at an idle point")
        if res["kind"] == "acceptance cycle":
            lines.append("LIVENESS VIOLATED: " + mode[4:])
        res["trace"] = lines
        shutil.copy(trail, os.path.join(RES, f"{cid}.model.pml.trail"))
        shutil.copy(os.path.join(d, "model.pml"), os.path.join(RES, f"{cid}.model.pml"))
        with open(os.path.join(RES, f"{cid}.trace.txt"), "w") as f:
            f.write(f"# {cid}: {title}\n# gen_model.py {gargs}  ({mode})\n")
            f.write(f"# {res['kind']}\n")
            # fixed-width columns: process | step
            for ln in lines:
                if " | " in ln:
                    who, what = ln.split(" | ", 1)
                    f.write(f"{who.strip():<4} {what}\n")
                else:
                    f.write(ln + "\n")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the large configurations")
    ap.add_argument("--only", default="", help="comma-separated configuration ids")
    ap.add_argument("--keep", action="store_true", help="keep the build directory")
    ap.add_argument("--gen", default="", help="extra gen_model.py options for every configuration (variants)")
    ap.add_argument("--tag", default="", help="write results to results/variants/TAG")
    a = ap.parse_args()
    global RES, EXTRA
    EXTRA = a.gen
    if a.tag:
        RES = os.path.join(HERE, "results", "variants", a.tag)
    for tool in ("spin", "cc"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found (Debian: apt-get install spin gcc)")
    os.makedirs(RES, exist_ok=True)
    work = tempfile.mkdtemp(prefix="rwdir-spin-")
    only = set(x for x in a.only.split(",") if x)
    rows, bad = [], 0
    t0 = time.time()
    for cfg in CONFIGS:
        if only and cfg[0] not in only:
            continue
        if a.quick and cfg[5]:
            continue
        r = run_one(cfg, work)
        ok = r["result"] == cfg[4]
        bad += not ok
        rows.append((cfg, r, ok))
        print(f"{cfg[0]:<4} {r['result']:<5} (expected {cfg[4]}) states={r.get('states')} "
              f"depth={r.get('depth')} {r.get('secs')}s {r.get('kind', '')}  {cfg[1]}", flush=True)
    # results.json keeps the latest result of every configuration, so that a
    # partial run (--only, --quick) updates summary.md without losing the rest
    store_path = os.path.join(RES, "results.json")
    store = {}
    if os.path.exists(store_path):
        with open(store_path) as f:
            store = json.load(f)
    for cfg, r, ok in rows:
        store[cfg[0]] = {k: r.get(k) for k in ("result", "kind", "states", "depth", "secs")}
    with open(store_path, "w") as f:
        json.dump(store, f, indent=1, sort_keys=True)
    with open(os.path.join(RES, "summary.md"), "w") as f:
        f.write("| id | configuration | gen_model.py options | check | states stored | depth | seconds | result | expected |\n")
        f.write("|---|---|---|---|---|---|---|---|---|\n")
        for cfg in CONFIGS:
            r = store.get(cfg[0])
            if not r:
                continue
            ok = r["result"] == cfg[4]
            check = {"safety": "safety (assertions + deadlock)", "bfs": "safety, BFS",
                     "bfs-noassert": "deadlock only, BFS"}.get(cfg[3], cfg[3].replace("ltl:", "LTL ") + " (weak fairness)")
            res = r["result"] + (f": {r['kind']}" if r.get("kind") else "")
            f.write(f"| {cfg[0]} | {cfg[1]} | `{cfg[2]}` | {check} | {r.get('states')} | {r.get('depth')} | "
                    f"{r.get('secs')} | {res} | {cfg[4]}{'' if ok else ' **MISMATCH**'} |\n")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("build directory kept:", work)
    print(f"{len(rows)} configurations, {bad} unexpected, {time.time() - t0:.0f}s")
    print(f"{len(rows) - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
