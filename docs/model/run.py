#!/usr/bin/env python3
"""Run the model-checking configurations of the rwdir protocol models with Spin.

Usage: python3 run.py [--quick | --all] [--only ID[,ID...]] [-j N] [--keep] [--trails]
                      [--gen ARGS --tag T] [--list]

  (default)  every configuration except the largest variant runs (tier "a")
  --quick    only the small configurations (tier "q")
  --all      everything
  Times and memory of each set: README.md beside this file.

Writes results/summary.md, results/results.json and results/<ID>.trace.txt (one
per counterexample) next to this script.  Build files go to a temporary
directory (removed unless --keep).  Needs: spin, a C compiler (cc), python3.

A result is PASS only when pan finished the whole search with no error.  A
search cut short (depth limit, memory limit, "Search not completed" without an
error) is INCOMPLETE, and a configuration that did not build or run is ERROR:
neither is ever counted as a pass.  A counterexample is FAIL even when pan
stops right after finding it (it always says "Search not completed" then).
"""
import argparse
import concurrent.futures
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RES = os.path.join(HERE, "results")   # --tag T: results/variants/T
EXTRA = ""                            # --gen ARGS: appended to every configuration's generator options
PAN_EXTRA = ""                        # --pan-extra / --cc-extra: for testing the INCOMPLETE detection
CC_EXTRA = ""
PAN_TIMEOUT = 3600                    # --timeout: seconds one pan search may take

# (id, title, generator args, mode, expected, tier)
#   mode: "safety" (assertions + invalid end states, DFS), "bfs" (the same, breadth-first:
#   shortest counterexample), "bfs-noassert" (only invalid end states), "bfs-noend" (only
#   assertions: for scenarios, whose gates may stop processes for good), "ltl:<name>" (LTL
#   property under weak fairness)
#   tier: "q" quick, "f" full (the default run), "a" only with --all
CONFIGS = [
    # ---- the original GlobalDirectoryLock protocol
    ("O1", "original: reader check-then-create vs writer (2W+2R)",
     "--proto orig --nw 2 --nr 2 --crash 0", "bfs", "FAIL", "q"),
    ("O2", "original: two writers, per-writer master names, ns read before create (2W)",
     "--proto orig --nw 2 --nr 0 --crash 0 --skew", "bfs", "FAIL", "q"),
    ("O2f", "original: two writers, ns = creation order (2W)",
     "--proto orig --nw 2 --nr 0 --crash 0", "bfs", "PASS", "q"),
    ("O3", "original: a crash leaves its file forever (1W+1R, 1 crash, deadlock only)",
     "--proto orig --nw 1 --nr 1 --crash 1", "bfs-noassert", "FAIL", "q"),
    # ---- corrected protocol, but with unsafe or missing stale breaking
    ("B0", "corrected, no stale breaking (2W+2R, 1 crash)",
     "--nw 2 --nr 2 --crash 1 --break none", "bfs", "FAIL", "q"),
    ("B1", "corrected, naive breaking: read owner, unlink (2W+2R, 1 crash)",
     "--nw 2 --nr 2 --crash 1 --break naive", "bfs", "FAIL", "q"),
    ("B2r", "corrected, tombstone breaking: rename, verify, link back (2W+2R, 1 crash)",
     "--nw 2 --nr 2 --crash 1 --break tomb --no-prio", "bfs", "FAIL", "q"),
    ("B2w", "corrected, tombstone breaking, writer in the window (2W+1R, 1 crash)",
     "--nw 2 --nr 1 --crash 1 --break tomb --no-prio", "bfs", "FAIL", "q"),
    # ---- corrected protocol with exclusive breaking, one namespace (exact judgement): all must pass
    ("F1", "corrected: 2W+2R, 1 crash, any ns order, timeouts",
     "--nw 2 --nr 2 --crash 1 --skew --giveup", "safety", "PASS", "q"),
    ("F2", "corrected: 2W+2R, 2 crashes",
     "--nw 2 --nr 2 --crash 2", "safety", "PASS", "f"),
    ("F3", "corrected: 2W+1R, 2 crashes, any ns order, timeouts",
     "--nw 2 --nr 1 --crash 2 --skew --giveup", "safety", "PASS", "q"),
    ("F4", "corrected: 2W+3R, 1 crash",
     "--nw 2 --nr 3 --crash 1", "safety", "PASS", "f"),
    ("F5", "corrected: readdir not atomic (one entry per step), pending then master; 2W+2R, 1 crash, any ns order, timeouts",
     "--nw 2 --nr 2 --crash 1 --scan 1 --skew --giveup", "safety", "PASS", "f"),
    ("F6", "corrected: readdir not atomic, master then pending; 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1 --scan 2", "safety", "PASS", "q"),
    ("F7", "corrected: writer FIFO (ns = creation order); 2W+2R, 1 crash, timeouts",
     "--nw 2 --nr 2 --crash 1 --fifo --giveup", "safety", "PASS", "q"),
    ("F8", "corrected: writer FIFO; 3W+1R, 1 crash",
     "--nw 3 --nr 1 --crash 1 --fifo", "safety", "PASS", "q"),
    ("L1", "corrected: every waiting writer eventually enters (weak fairness); 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1", "ltl:wlive", "PASS", "q"),
    ("L2", "corrected: a waiting reader enters once writers stop (weak fairness); 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1 --stop", "ltl:rlive", "PASS", "q"),
    ("L3", "corrected: writer liveness; 3W+1R, 1 crash",
     "--nw 3 --nr 1 --crash 1", "ltl:wlive", "PASS", "q"),
    ("L4", "corrected: writer liveness; 2W+1R, 2 crashes",
     "--nw 2 --nr 1 --crash 2", "ltl:wlive", "PASS", "q"),
    ("X1", "corrected, unbounded ns skew: a writer can be overtaken forever (2W+1R)",
     "--nw 2 --nr 1 --crash 0 --skew", "ltl:wlive", "FAIL", "q"),
    # ---- issue #18: a lease that expires while its owner waits.  W0 = X and R0 share
    # namespace 0 (exact judgement between them), W1 = Y is in namespace 1 and judges X
    # by lease (and X judges Y by lease).  The scenario options (--once, --gate, --leave)
    # fix the cast and the order of arrival of the traces; the model checker finds
    # the interleaving.  Variant old = the released code, fixed = the fix.
    ("T1", "issue #18 trace 1, variant old: X's .master_lock goes stale while X waits in W5; Y breaks it; both enter (no W6)",
     "--nw 2 --nr 1 --crash 0 --ns 0,1,0 --no-prio --once --gate 'W0=inside(R0) && beating(R0)' "
     "--gate 'W1=holds(W0)' --leave 'R0=holds(W1)' --variant old --no-own-entry --no-own-unlink", "bfs-noend", "FAIL", "q"),
    ("T1f", "issue #18 trace 1 scenario, variant fixed",
     "--nw 2 --nr 1 --crash 0 --ns 0,1,0 --no-prio --once --gate 'W0=inside(R0) && beating(R0)' "
     "--gate 'W1=holds(W0)' --leave 'R0=holds(W1)' --variant fixed", "bfs-noend", "PASS", "q"),
    ("T2", "issue #18 trace 2, variant old: X is granted with a stale .master_lock after waiting in W5; Y breaks it and enters",
     "--nw 2 --nr 1 --crash 0 --ns 0,1,0 --no-prio --once --gate 'W0=inside(R0) && beating(R0)' "
     "--leave 'R0=holds(W0)' --gate 'W1=inside(W0)' --variant old --no-own-entry --no-own-unlink", "bfs-noend", "FAIL", "q"),
    ("T2w", "issue #18 trace 2, variant old plus W6: W6 does not help",
     "--nw 2 --nr 1 --crash 0 --ns 0,1,0 --no-prio --once --gate 'W0=inside(R0) && beating(R0)' "
     "--leave 'R0=holds(W0)' --gate 'W1=inside(W0)' --variant old --w6 --no-own-unlink", "bfs-noend", "FAIL", "q"),
    ("T2f", "issue #18 trace 2 scenario, variant fixed",
     "--nw 2 --nr 1 --crash 0 --ns 0,1,0 --no-prio --once --gate 'W0=inside(R0) && beating(R0)' "
     "--leave 'R0=holds(W0)' --gate 'W1=inside(W0)' --variant fixed", "bfs-noend", "PASS", "q"),
    ("T3", "issue #18 trace 3, variant old: X times out and unlinks Y's .master_lock; Z creates one; Y and Z both enter",
     "--nw 3 --nr 1 --crash 0 --ns 0,1,0,0 --no-prio --giveup-only W0 --once --gate 'W0=inside(R0) && beating(R0)' "
     "--gate 'W1=holds(W0)' --gate 'W2=holds(W1)' --leave 'R0=holds(W2)' --variant old --no-own-entry --no-own-unlink",
     "bfs-noend", "FAIL", "q"),
    ("T3f", "issue #18 trace 3 scenario, variant fixed",
     "--nw 3 --nr 1 --crash 0 --ns 0,1,0,0 --no-prio --giveup-only W0 --once --gate 'W0=inside(R0) && beating(R0)' "
     "--gate 'W1=holds(W0)' --gate 'W2=holds(W1)' --leave 'R0=holds(W2)' --variant fixed", "bfs-noend", "PASS", "q"),
    ("T4", "issue #18 FIFO across namespaces, variant old: a waiting writer's pending file goes stale, is removed, it is overtaken",
     "--nw 2 --nr 1 --crash 0 --ns 0,1,0 --fifo --no-prio --ww-only --variant old --no-own-entry --no-own-unlink",
     "bfs", "FAIL", "q"),
    ("T4f", "issue #18 FIFO across namespaces, variant fixed (all properties)",
     "--nw 2 --nr 1 --crash 0 --ns 0,1,0 --fifo --variant fixed", "bfs", "PASS", "q"),
    # ---- no scenario: the released code fails in general, and which fix matters
    ("Mold", "variant old, 2W+2R in two namespaces, 1 crash (shortest counterexample of any property)",
     "--nw 2 --nr 2 --crash 1 --ns 0,1,0,1 --variant old", "bfs", "FAIL", "q"),
    ("A1", "variant old except that files are refreshed from creation (no touch at grant, no W6, unchecked unlinks); 2W+2R, two namespaces, 1 crash, timeouts",
     "--nw 2 --nr 2 --crash 1 --ns 0,1,0,1 --giveup --variant old --refresh create", "safety", "PASS", "q"),
    ("A2", "variant fixed except that files are refreshed only inside (touch at grant, W6, checked unlinks kept); 2W+2R, two namespaces, 1 crash",
     "--nw 2 --nr 2 --crash 1 --ns 0,1,0,1 --variant fixed --refresh cs --no-prio --ww-only", "bfs", "FAIL", "q"),
    # ---- the fixed protocol with namespaces mixed: F and L again, some processes judged by lease
    ("MF1", "fixed, two namespaces {W0,R0} {W1,R1}: 2W+2R, 1 crash, any ns order, timeouts",
     "--nw 2 --nr 2 --crash 1 --skew --giveup --ns 0,1,0,1", "safety", "PASS", "q"),
    ("MF1x", "fixed, every process in its own namespace: 2W+2R, 1 crash, any ns order, timeouts",
     "--nw 2 --nr 2 --crash 1 --skew --giveup --ns 0,1,2,3", "safety", "PASS", "a"),
    ("MF2", "fixed, two namespaces: 2W+2R, 2 crashes",
     "--nw 2 --nr 2 --crash 2 --ns 0,1,0,1", "safety", "PASS", "a"),
    ("MF3", "fixed, two namespaces {W0} {W1,R0}: 2W+1R, 2 crashes, any ns order, timeouts",
     "--nw 2 --nr 1 --crash 2 --skew --giveup --ns 0,1,1", "safety", "PASS", "q"),
    ("MF4", "fixed, two namespaces {W0,R0,R2} {W1,R1}: 2W+3R, 1 crash",
     "--nw 2 --nr 3 --crash 1 --ns 0,1,0,1,0", "safety", "PASS", "a"),
    ("MF5", "fixed, two namespaces: readdir not atomic, pending then master; 2W+2R, 1 crash, any ns order, timeouts",
     "--nw 2 --nr 2 --crash 1 --scan 1 --skew --giveup --ns 0,1,0,1", "safety", "PASS", "a"),
    ("MF6", "fixed, two namespaces: readdir not atomic, master then pending; 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1 --scan 2 --ns 0,1,0,1", "safety", "PASS", "q"),
    ("MF7", "fixed, two namespaces: writer FIFO, timeouts; 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1 --fifo --giveup --ns 0,1,0,1", "safety", "PASS", "q"),
    ("MF8", "fixed, three namespaces {W0,R0} {W1} {W2}: writer FIFO; 3W+1R, 1 crash",
     "--nw 3 --nr 1 --crash 1 --fifo --ns 0,1,2,0", "safety", "PASS", "q"),
    ("ML1", "fixed, two namespaces: every waiting writer eventually enters; 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1 --ns 0,1,0,1", "ltl:wlive", "PASS", "q"),
    ("ML2", "fixed, two namespaces: a waiting reader enters once writers stop; 2W+2R, 1 crash",
     "--nw 2 --nr 2 --crash 1 --stop --ns 0,1,0,1", "ltl:rlive", "PASS", "q"),
    ("ML3", "fixed, three namespaces: writer liveness; 3W+1R, 1 crash",
     "--nw 3 --nr 1 --crash 1 --ns 0,1,2,0", "ltl:wlive", "PASS", "f"),
    ("ML4", "fixed, two namespaces {W0} {W1,R0}: writer liveness; 2W+1R, 2 crashes",
     "--nw 2 --nr 1 --crash 2 --ns 0,1,1", "ltl:wlive", "PASS", "q"),
    # ---- the limit: an owner paused longer than its lease (--lease = every process in its own
    # namespace, variant pause: any file may go stale at any time).  Only the fencing token helps.
    ("E1", "pause: a paused reader's .slave_lock is removed, a writer enters (1W+1R)",
     "--nw 1 --nr 1 --crash 0 --lease --no-prio --no-own-entry --no-own-unlink", "bfs", "FAIL", "q"),
    ("E2", "pause: a paused writer's .master_lock is broken, a second writer enters (2W)",
     "--nw 2 --nr 0 --crash 0 --lease --no-prio --no-victim --no-own-entry --no-own-unlink", "bfs", "FAIL", "q"),
    ("E3", "pause: the breaker unlinks the successor's .master_lock (3W, mutex assertion off)",
     "--nw 3 --nr 0 --crash 0 --lease --no-prio --no-mutex --no-own-entry --no-own-unlink", "bfs", "FAIL", "q"),
]

# ---- implementation shortcuts (docs/protocol-notes.md): V1, V2, tokens, V4
_BASE = {c[0]: c for c in CONFIGS}
_V12_FULL = ["F1", "F3", "F6", "F7", "F8", "L1", "L2", "L3", "L4"]   # V1+V2 in the default run
for _b in ["F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "L1", "L2", "L3", "L4"]:
    _c = _BASE[_b]
    for _tag, _g in (("V1", "--v1 wake"), ("V2", "--v2"), ("V12", "--v1 wake --v2")):
        _tier = "f" if _tag == "V12" and _b in _V12_FULL else "a"
        CONFIGS.append((f"{_b}-{_tag}", f"{_c[1]}; shortcut {_tag.replace('V12', 'V1+V2')}", f"{_c[2]} {_g}",
                        _c[3], "PASS", _tier))
for _b in ["F1", "F3", "F7", "F8"]:
    _c = _BASE[_b]
    CONFIGS.append((f"{_b}-tok", f"{_c[1]}; fencing tokens 1..4 (T1-T4)", f"{_c[2]} --tokens 4", _c[3], "PASS", "f"))
    CONFIGS.append((f"{_b}-V4", f"{_c[1]}; tokens, V4 (T2 by renameat2 NOREPLACE)", f"{_c[2]} --tokens 4 --v4",
                    _c[3], "PASS", "f"))
    CONFIGS.append((f"{_b}-V4m", f"{_c[1]}; tokens, V4 in W0 only, put in the others (mixed deployment)",
                    f"{_c[2]} --tokens 4 --v4 --v4-mixed", _c[3], "PASS", "f" if _b == "F1" else "a"))
# V5 (W2 judges only the pending files between its own and the nearest live older one), alone
# on every F, L, MF and ML base, and with V1 and V2 as the implementation runs them (V125)
_V5_Q = {"F1", "F3", "F7", "F8", "L2", "L4", "MF7", "MF8"}     # small: in the quick set
_V5_A = {"MF2", "MF4", "MF5"}                                  # large: --all only
for _b in [f"F{i}" for i in range(1, 9)] + [f"L{i}" for i in range(1, 5)] \
        + [f"MF{i}" for i in range(1, 9)] + [f"ML{i}" for i in range(1, 5)]:
    _c = _BASE[_b]
    CONFIGS.append((f"{_b}-V5", f"{_c[1]}; shortcut V5", f"{_c[2]} --v5", _c[3], "PASS",
                    "q" if _b in _V5_Q else "a" if _b in _V5_A else "f"))
for _b in ["F1", "F3", "F7", "F8", "L1", "L2", "L3", "L4", "MF1", "ML1"]:
    _c = _BASE[_b]
    CONFIGS.append((f"{_b}-V125", f"{_c[1]}; shortcuts V1+V2+V5", f"{_c[2]} --v1 wake --v2 --v5", _c[3], "PASS",
                    "a" if _b in ("L3", "MF1", "ML1") else "f"))
# V6 (the writer fast path: no pending file when the first listing shows no .master_lock
# and no pending file), alone and with every shortcut the implementation runs (V1, V2, V5:
# V1256), on the F, L, MF, ML bases and the FIFO-across-namespaces scenario
_V6_Q = {"F1", "F3", "F7", "F8", "L2", "L4", "MF7", "MF8", "T4f"}
_V6_A = {"MF2", "MF4", "MF5"}
for _b in [f"F{i}" for i in range(1, 9)] + [f"L{i}" for i in range(1, 5)] \
        + [f"MF{i}" for i in range(1, 9)] + [f"ML{i}" for i in range(1, 5)] + ["T4f"]:
    _c = _BASE[_b]
    _t = "q" if _b in _V6_Q else "a" if _b in _V6_A else "f"
    CONFIGS.append((f"{_b}-V6", f"{_c[1]}; shortcut V6", f"{_c[2]} --v6", _c[3], "PASS", _t))
    # the largest (F2, F4, F5: 4-11 GB, 12-25 min each) --all only, like V1+V2 on F4 and F5
    CONFIGS.append((f"{_b}-V1256", f"{_c[1]}; shortcuts V1+V2+V5+V6", f"{_c[2]} --v1 wake --v2 --v5 --v6", _c[3],
                    "PASS", "a" if _t == "a" or _b in ("L3", "MF1", "ML1", "F2", "F4", "F5") else _t))
for _b in ["F7", "F8"]:
    _c = _BASE[_b]
    CONFIGS.append((f"{_b}-V46", f"{_c[1]}; tokens, V4, V6", f"{_c[2]} --tokens 4 --v4 --v6", _c[3], "PASS", "f"))
CONFIGS += [
    ("V6p1", "V6 probe: the fast path's create of .master_lock succeeds (reachable: must FAIL)",
     "--nw 2 --nr 1 --crash 1 --fifo --v6 --v6-probe ok", "bfs", "FAIL", "q"),
    ("V6p2", "V6 probe: the fast path meets EEXIST and queues (reachable: must FAIL)",
     "--nw 2 --nr 1 --crash 1 --fifo --v6 --v6-probe eexist", "bfs", "FAIL", "q"),
    ("V6m", "V6 mutant: the fast path does not look for pending files: a queued writer is overtaken (2W+1R)",
     "--nw 2 --nr 1 --crash 0 --fifo --v6 --v6-mutant nolook", "bfs", "FAIL", "q"),
]
# V7 (the reader fast path: a reader whose last R3 found the directory free skips R1 in
# its next attempt), alone on the F and L bases and with every other shortcut (V125678 =
# V1+V2+V5+V6+V7). The implementation takes it only where a listing is one snapshot
# (local filesystems, one getdents64 call): F6, where R3 reads .master_lock before the
# pending files, must fail as V1loose does.
for _b in [f"F{i}" for i in range(1, 9)] + [f"L{i}" for i in range(1, 5)] + ["MF1", "MF7", "ML1"]:
    _c = _BASE[_b]
    _t = "q" if _b in ("F1", "F3", "F6", "F7", "F8", "L2", "L4") else "a" if _b in ("F2", "F4", "F5") else "f"
    CONFIGS.append((f"{_b}-V7", f"{_c[1]}; shortcut V7", f"{_c[2]} --v7 on", _c[3],
                    "FAIL" if _b == "F6" else "PASS", _t))
for _b in ["F1", "F3", "F7", "F8", "L1", "L2", "L4"]:
    _c = _BASE[_b]
    CONFIGS.append((f"{_b}-V12567", f"{_c[1]}; shortcuts V1+V2+V5+V6+V7",
                    f"{_c[2]} --v1 wake --v2 --v5 --v6 --v7 on", _c[3], "PASS", "f"))
CONFIGS += [
    ("V7p", "V7 probe: a reader skips R1 (reachable: must FAIL)",
     "--nw 1 --nr 1 --crash 0 --v7 on --v7-probe skip", "bfs", "FAIL", "q"),
    ("L1-V7m", "V7 mutant: a reader skips R1 whatever its last R3 found: a draining writer starves (L1)",
     "--nw 2 --nr 2 --crash 1 --v7 mutant", "ltl:wlive", "FAIL", "q"),
]
# V8 (one wake-up per grant: a writer keeps its pending file while it holds .master_lock and
# removes it after .master_lock, so the writer behind it, waiting for that one file, wakes once
# per grant), alone on the F, L, MF, ML bases and T4f, and with every other shortcut
# (V1+V2+V5+V6+V7+V8 = V1256-78)
_V8_Q = {"F1", "F3", "F6", "F7", "F8", "L2", "L4", "MF7", "MF8", "T4f"}
_V8_A = {"F2", "F4", "F5", "MF2", "MF4", "MF5"}
for _b in [f"F{i}" for i in range(1, 9)] + [f"L{i}" for i in range(1, 5)] \
        + [f"MF{i}" for i in range(1, 9)] + [f"ML{i}" for i in range(1, 5)] + ["T4f"]:
    _c = _BASE[_b]
    _t = "q" if _b in _V8_Q else "a" if _b in _V8_A else "f"
    CONFIGS.append((f"{_b}-V8", f"{_c[1]}; shortcut V8", f"{_c[2]} --v8 on", _c[3], "PASS", _t))
    if _b == "F6":   # V7 fails F6 by design (a hinted R3 must be one snapshot)
        continue
    CONFIGS.append((f"{_b}-V125678", f"{_c[1]}; shortcuts V1+V2+V5+V6+V7+V8",
                    f"{_c[2]} --v1 wake --v2 --v5 --v6 --v7 on --v8 on", _c[3], "PASS",
                    "a" if _t == "a" or _b in ("L3", "MF1", "ML1", "MF3", "MF6", "ML3", "ML4") else "f"))
# V9 (with V8 and V2: a writer whose only older pending file is the holder's waits for
# .master_lock and takes it without a listing): V2+V8+V9 (V289) on the F, L, MF, ML bases and
# T4f, and with every shortcut (V1256789)
for _b in [f"F{i}" for i in range(1, 9)] + [f"L{i}" for i in range(1, 5)] \
        + [f"MF{i}" for i in range(1, 9)] + [f"ML{i}" for i in range(1, 5)] + ["T4f"]:
    _c = _BASE[_b]
    _t = "q" if _b in _V8_Q and _b != "F1" else "a" if _b in _V8_A else "f"
    CONFIGS.append((f"{_b}-V289", f"{_c[1]}; shortcuts V2+V8+V9", f"{_c[2]} --v2 --v8 on --v9 on", _c[3],
                    "PASS", _t))
    if _b == "F6":   # V7 fails F6 by design
        continue
    CONFIGS.append((f"{_b}-V1256789", f"{_c[1]}; shortcuts V1+V2+V5+V6+V7+V8+V9",
                    f"{_c[2]} --v1 wake --v2 --v5 --v6 --v7 on --v8 on --v9 on", _c[3], "PASS",
                    "q" if _b == "T4f" else "a" if _t == "a" or _b in ("L3", "MF1", "ML1", "MF3", "MF6", "ML3", "ML4")
                    else "f"))
# V10 (a reader woken by the removal of the queued writer's file it waited for skips R1),
# alone, and with every shortcut (V1 to V10: "Vall")
for _b in [f"F{i}" for i in range(1, 9)] + [f"L{i}" for i in range(1, 5)] + ["MF1", "MF7", "ML1", "ML2"]:
    _c = _BASE[_b]
    _t = "q" if _b in ("F3", "F7", "L4") else "a" if _b in ("F2", "F4", "F5") else "f"
    # F6 (R3 reads .master_lock, then the pending files): V10 alone fails writer priority, as
    # found on 2026-12-02: a woken reader announces while an older writer still waits, and that
    # writer creates .master_lock and removes its pending file (W3) between the reader's two
    # looks. V10 ships only with V8, which keeps the pending file until the release: F6-V810
    # and F6-Vall7 (every shortcut but V7, which F6 excludes by design) must pass.
    CONFIGS.append((f"{_b}-V10", f"{_c[1]}; shortcut V10", f"{_c[2]} --v10", _c[3],
                    "FAIL" if _b == "F6" else "PASS", _t))
    if _b == "F6":   # V7 fails F6 by design
        CONFIGS.append((f"{_b}-V810", f"{_c[1]}; shortcuts V8+V10", f"{_c[2]} --v8 on --v10", _c[3],
                        "PASS", "f"))
        CONFIGS.append((f"{_b}-Vall7", f"{_c[1]}; shortcuts V1+V2+V5+V6+V8+V9+V10 (all but V7)",
                        f"{_c[2]} --v1 wake --v2 --v5 --v6 --v8 on --v9 on --v10", _c[3], "PASS", "f"))
        continue
    CONFIGS.append((f"{_b}-Vall", f"{_c[1]}; shortcuts V1+V2+V5+V6+V7+V8+V9+V10",
                    f"{_c[2]} --v1 wake --v2 --v5 --v6 --v7 on --v8 on --v9 on --v10", _c[3], "PASS",
                    "a" if _t == "a" or _b in ("L3", "MF1", "ML1", "ML2") else "f"))
CONFIGS += [
    ("V10p", "V10 probe: a reader woken by the removal of the pending file it waited for skips R1 "
     "(reachable: must FAIL)", "--nw 1 --nr 1 --crash 0 --v10 --v10-probe skip", "bfs", "FAIL", "q"),
    ("V9p", "V9 probe: a writer behind the holder's own pending file arms V2 (reachable: must FAIL)",
     "--nw 2 --nr 1 --crash 0 --fifo --v2 --v8 on --v9 on --v9-probe arm", "bfs", "FAIL", "q"),
    ("V9pr", "V9 probe: a reader behind the holder's own pending file arms V1 (reachable: must FAIL)",
     "--nw 2 --nr 1 --crash 0 --v1 wake --v2 --v8 on --v9 on --v9-probe reader", "bfs", "FAIL", "q"),
    ("F8-V9m", "V9 mutant: arms behind any writer, holder or not: a queued writer is overtaken (3W+1R)",
     "--nw 3 --nr 1 --crash 1 --fifo --v2 --v8 on --v9 mutant", "safety", "FAIL", "q"),
    ("V8p", "V8 probe: a holder removes its pending file while another writer is queued behind it "
     "(reachable: must FAIL)", "--nw 2 --nr 1 --crash 0 --fifo --v8 on --v8-probe behind", "bfs", "FAIL", "q"),
    ("L1-V8m", "V8 mutant: the pending file stays after the grant (its live owner stops): the writer behind waits forever (L1)",
     "--nw 2 --nr 2 --crash 1 --v8 keep", "ltl:wlive", "FAIL", "q"),
]
# V11 (threads of one process share one reader marker: a thread that finds its process's live
# marker joins it, count + 1, lists the directory as R3 does, checks that the marker is still
# its own, and is in; the last one out unlinks it): alone, and with every shortcut (Vall11);
# F6 with every shortcut but V7 (Vall711), as F6-Vall7
# the quick set (every CI run) keeps the V11 runs under a minute each
_V11_Q = {"F3", "F6", "F7", "F8", "L4"}
for _b in ["F1", "F3", "F5", "F6", "F7", "F8", "L1", "L2", "L4", "MF1", "MF7", "ML1"]:
    _c = _BASE[_b]
    # F6 (R3 reads .master_lock, then the pending files): V11 alone fails writer priority, as
    # V10 alone does: a joining thread reads .master_lock (absent) while an older writer
    # waits, the writer creates .master_lock and removes its pending file (W3), and the
    # thread reads no pending file and is in. With V8 (the pending file stays until the
    # release), F6-V811 and F6-Vall711 must pass.
    CONFIGS.append((f"{_b}-V11", f"{_c[1]}; shortcut V11", f"{_c[2]} --v11", _c[3],
                    "FAIL" if _b == "F6" else "PASS", "q" if _b in _V11_Q else "f"))
    if _b in ("F1", "F3", "F7", "F8", "L1", "L2", "L4", "MF7"):
        CONFIGS.append((f"{_b}-Vall11", f"{_c[1]}; shortcuts V1+V2+V5+V6+V7+V8+V9+V10+V11",
                        f"{_c[2]} --v1 wake --v2 --v5 --v6 --v7 on --v8 on --v9 on --v10 --v11", _c[3], "PASS",
                        "f" if _b in ("F3", "F8", "L4") else "a"))
    # The writer's shortcuts with V11 (Vw11: V2+V5+V6+V8+V9+V11): the join reads only
    # what writers make (.master_lock, the pending files), so these are the shortcuts it
    # meets; the reader's own (V1, V7, V10) act in R1, which a join never runs.
    CONFIGS.append((f"{_b}-Vw11", f"{_c[1]}; shortcuts V2+V5+V6+V8+V9+V11",
                    f"{_c[2]} --v2 --v5 --v6 --v8 on --v9 on --v11", _c[3], "PASS",
                    "q" if _b in ("F8", "L4") else "f"))
    if _b == "F6":   # V7 fails F6 by design
        CONFIGS.append((f"{_b}-V811", f"{_c[1]}; shortcuts V8+V11", f"{_c[2]} --v8 on --v11", _c[3],
                        "PASS", "f"))
        CONFIGS.append((f"{_b}-Vall711", f"{_c[1]}; shortcuts V1+V2+V5+V6+V8+V9+V10+V11 (all but V7)",
                        f"{_c[2]} --v1 wake --v2 --v5 --v6 --v8 on --v9 on --v10 --v11", _c[3], "PASS", "f"))
CONFIGS += [
    ("V11p", "V11 probe: a thread joins its process's marker and enters (reachable: must FAIL)",
     "--nw 1 --nr 1 --crash 0 --v11 --v11-probe join", "bfs", "FAIL", "q"),
    ("V11m", "V11 mutant: the join does not list the directory: a joining thread overtakes a waiting writer (2W+1R)",
     "--nw 2 --nr 1 --crash 0 --v11 --v11-mutant", "bfs", "FAIL", "q"),
]
# V12 (a candidate, not in the code: docs/protocol-notes.md, "V12"): a queued writer woken
# by the removal of its predecessor's pending file creates .master_lock without W2's listing, and
# the listing after it decides FIFO (back off if a live older pending file is queued) and serves
# T1; "lean" also drops T3's listing on that path (without tokens, lean and on are the same
# model). Checked on 2026-12-03 with the writer's shortcuts the implementation runs
# (V2+V5+V6+V8+V9, "Vw12"): refuted as sketched. Its back-off removes a .master_lock whose
# owner stays queued, and V9 (a writer behind the holder's own pending file takes
# .master_lock the moment it goes) then overtakes that older writer: F8, MF7 and MF8 fail
# FIFO. The configurations run are kept with what they gave; a revised V12 gets its own set.
_V12_FAIL = {"F8", "MF7", "MF8"}
for _b in ["F1", "F3", "F7", "F8", "L4", "MF7", "MF8"]:
    _c = _BASE[_b]
    CONFIGS.append((f"{_b}-Vw12", f"{_c[1]}; shortcuts V2+V5+V6+V8+V9, candidate V12"
                    + (" (its back-off lets V9 overtake: FIFO fails)" if _b in _V12_FAIL else ""),
                    f"{_c[2]} --v2 --v5 --v6 --v8 on --v9 on --v12 lean", _c[3],
                    "FAIL" if _b in _V12_FAIL else "PASS", "f"))
CONFIGS += [
    ("V12pa", "V12 probe: a writer arms V12 behind a live predecessor (reachable: must FAIL)",
     "--nw 2 --nr 1 --crash 0 --v2 --v8 on --v12 on --v12-probe arm", "bfs", "FAIL", "f"),
    ("V12pw", "V12 probe: a woken writer creates .master_lock without a listing (reachable: must FAIL)",
     "--nw 2 --nr 1 --crash 0 --v2 --v8 on --v12 on --v12-probe woken", "bfs", "FAIL", "f"),
    ("V12pp", "V12 probe: its listing after .master_lock finds no older writer (reachable: must FAIL)",
     "--nw 2 --nr 1 --crash 0 --v2 --v8 on --v12 on --v12-probe pass", "bfs", "FAIL", "f"),
    ("F8-V12m", "V12 mutant: no FIFO check after the put: a queued writer is overtaken (3W+1R)",
     "--nw 3 --nr 1 --crash 1 --fifo --v2 --v8 on --v12 mutant", "safety", "FAIL", "f"),
]
# V13 (issue #14: one judgement fewer per contended grant): a writer judges, and breaks,
# .master_lock only when no live pending file stands between its own and the head of the
# queue. It only removes behaviours (the break becomes enabled in fewer states), so every
# safety property carries over; what it can break is liveness, a dead .master_lock that
# no one breaks. With two writers it changes nothing (the second is always right behind
# the head), and a reader can break the dead file itself (R1), so its own liveness
# configurations have three writers and no reader (LW3, MLW3); the mutant (no writer
# judges .master_lock) shows that they fail when no writer breaks it.
_WV = "--v2 --v5 --v6 --v8 on --v9 on"
CONFIGS += [
    ("LW3", "corrected: writer liveness; 3W, no reader, 1 crash",
     "--nw 3 --nr 0 --crash 1", "ltl:wlive", "PASS", "f"),
    ("LW3-Vw", "corrected: writer liveness; 3W, no reader, 1 crash; shortcuts V2+V5+V6+V8+V9",
     f"--nw 3 --nr 0 --crash 1 {_WV}", "ltl:wlive", "PASS", "f"),
    ("LW3-Vw13", "corrected: writer liveness; 3W, no reader, 1 crash; shortcuts V2+V5+V6+V8+V9+V13",
     f"--nw 3 --nr 0 --crash 1 {_WV} --v13 on", "ltl:wlive", "PASS", "q"),
    ("LW3-V13m", "V13 mutant: no writer judges .master_lock: a dead holder wedges the writers (3W, no reader)",
     f"--nw 3 --nr 0 --crash 1 {_WV} --v13 mutant", "ltl:wlive", "FAIL", "q"),
    ("MLW3-Vw13", "fixed, three namespaces {W0} {W1} {W2}: writer liveness; 3W, no reader, 1 crash; "
     "shortcuts V2+V5+V6+V8+V9+V13",
     f"--nw 3 --nr 0 --crash 1 --ns 0,1,2 {_WV} --v13 on", "ltl:wlive", "PASS", "f"),
    ("V13p", "V13 probe: a writer finds a dead .master_lock and leaves it to the writers ahead (reachable: must FAIL)",
     f"--nw 3 --nr 0 --crash 1 {_WV} --v13 on --v13-probe skip", "bfs", "FAIL", "q"),
]
for _b in ["F8", "L3", "MF8", "ML3"]:
    _c = _BASE[_b]
    CONFIGS.append((f"{_b}-Vw13", f"{_c[1]}; shortcuts V2+V5+V6+V8+V9+V13",
                    f"{_c[2]} {_WV} --v13 on", _c[3], "PASS", "q" if _b == "F8" else "f"))
_TL = "--nr 0 --crash 0 --lease --no-prio --no-mutex --no-victim --no-own-entry --no-own-unlink --tokens 4 --tok-lost"
CONFIGS += [
    ("F6-V1loose", "V1 loosened: a reader may skip R1 at any time (F6: readdir not atomic)",
     "--nw 2 --nr 2 --crash 1 --scan 2 --v1 loose", "bfs", "FAIL", "q"),
    ("V4L2", "pause (two writers may allocate at once): V4 keeps tokens unique and growing (2W)",
     f"--nw 2 {_TL} --v4", "safety", "PASS", "q"),
    ("V4L3", "pause: V4 keeps tokens unique and growing (3W)",
     f"--nw 3 {_TL} --v4", "safety", "PASS", "q"),
    ("V4L3m", "pause: mutant V4 with a plain rename(2) that overwrites: two grants of one token (3W)",
     f"--nw 3 {_TL} --v4 --v4-mutant overwrite", "bfs", "FAIL", "q"),
    ("V4L2m", "pause: mixed deployment, the V4 writer's rename overwrites: two grants of one token (2W)",
     f"--nw 2 {_TL} --v4 --v4-mixed --v4-mutant overwrite", "bfs", "FAIL", "q"),
    ("V4L21", "pause: V4 keeps tokens unique and growing (2W+1R)",
     f"--nw 2 {_TL.replace('--nr 0', '--nr 1')} --v4", "safety", "PASS", "a"),
    ("V46L2", "pause: V4 with the V6 fast path keeps tokens unique and growing (2W)",
     f"--nw 2 {_TL} --v4 --v6", "safety", "PASS", "q"),
    ("V46L3", "pause: V4 with the V6 fast path keeps tokens unique and growing (3W)",
     f"--nw 3 {_TL} --v4 --v6", "safety", "PASS", "q"),
    # V12 lean drops T3 on the woken path: found on 2026-12-03 to fail the token property as
    # the model states it (a token counts as granted at T3): a writer paused past its lease
    # passes T3 with a higher token and is then stopped by W6, while the V12 writer, which
    # took a lower token before it and made no T3 listing, enters. Whether tokens of the
    # writers that enter still grow is a different property, not checked here.
    ("V4L2-V12", "pause: V4 with V2+V8 and candidate V12 lean (no T3 listing after a woken put): a lower "
     "token than one that passed T3 (2W)", f"--nw 2 {_TL} --v4 --v2 --v8 on --v12 lean", "safety", "FAIL", "f"),
    ("V4L2-V12on", "pause: V4 with V2+V8 and candidate V12 keeping T3 keeps tokens unique and growing (2W)",
     f"--nw 2 {_TL} --v4 --v2 --v8 on --v12 on", "safety", "PASS", "f"),
]

# V14 (lazy fencing token, docs/protocol-notes.md): no W4 before the grant; a holder that asks
# for its token runs T1-T3 while inside, then W6's ownership check, and only then has it
CONFIGS += [
    ("V14L2", "pause: V14 (lazy token): tokens unique, growing, and only to the last writer granted (2W)",
     f"--nw 2 {_TL} --v4 --v14 on", "safety", "PASS", "q"),
    ("V14L3", "pause: V14: tokens unique, growing, and only to the last writer granted (3W)",
     f"--nw 3 {_TL} --v4 --v14 on", "safety", "PASS", "f"),
    ("V14L21", "pause: V14: tokens unique, growing, and only to the last writer granted (2W+1R)",
     f"--nw 2 {_TL.replace('--nr 0', '--nr 1')} --v4 --v14 on", "safety", "PASS", "f"),
    ("V146L2", "pause: V14 with the V6 fast path (2W)", f"--nw 2 {_TL} --v4 --v6 --v14 on", "safety", "PASS", "q"),
    ("V146L3", "pause: V14 with the V6 fast path (3W)", f"--nw 3 {_TL} --v4 --v6 --v14 on", "safety", "PASS", "f"),
    ("V14L2-Vw", "pause: V14 with the writer's shortcuts V2+V5+V6+V8+V9 (2W)",
     f"--nw 2 {_TL} --v4 {_WV} --v14 on", "safety", "PASS", "q"),
    ("V14L3-Vw", "pause: V14 with the writer's shortcuts V2+V5+V6+V8+V9 (3W)",
     f"--nw 3 {_TL} --v4 {_WV} --v14 on", "safety", "PASS", "a"),
    ("V14L2m", "pause: mutant V14 without the ownership check: a token for a writer whose lock was "
     "taken over (2W)", f"--nw 2 {_TL} --v4 --v14 nocheck", "bfs", "FAIL", "q"),
    ("V14p", "V14 probe: a hand-out of a lazy token is reached (must FAIL)",
     "--nw 2 --nr 1 --crash 1 --tokens 4 --v4 --v14 on --v14-probe handout", "bfs", "FAIL", "q"),
]
for _b in ["F1", "F3", "F7", "F8", "MF1", "MF7"]:
    _c = _BASE[_b]
    CONFIGS.append((f"{_b}-V4-V14", f"{_c[1]}; tokens, V4, V14 (lazy token)", f"{_c[2]} --tokens 4 --v4 --v14 on",
                    _c[3], "PASS", "q" if _b in ("F3", "F8") else "f"))
for _b in ["F7", "F8", "MF7", "MF8"]:
    _c = _BASE[_b]
    CONFIGS.append((f"{_b}-Vw14", f"{_c[1]}; tokens, V4, V14 with the writer's shortcuts V2+V5+V6+V8+V9",
                    f"{_c[2]} --tokens 4 --v4 {_WV} --v14 on", _c[3], "PASS", "f"))


def sh(cmd, cwd, timeout=3600):
    t = time.time()
    p = subprocess.run(cmd, cwd=cwd, shell=isinstance(cmd, str), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return p.returncode, p.stdout, time.time() - t


def names(nw):
    def f(m):
        pid, c = int(m.group(1)), int(m.group(2))
        n = f"W{pid}" if pid < nw else f"R{pid - nw}"
        return n + "'" * c
    return f


def classify(out):
    """PASS / FAIL / INCOMPLETE / ERROR from pan's output."""
    errors = re.search(r"errors: (\d+)", out)
    low = out.lower()
    trunc = ("max search depth too small" in low or "out of memory" in low
             or "search not completed" in low or "reached -dmemlim bound" in low
             or "memory limit" in low)
    if errors is None or "too small, recompile" in low:
        # no verdict, or pan stopped before searching (-DMA=N below the state vector)
        return "ERROR", trunc
    if int(errors.group(1)) > 0:
        return "FAIL", trunc          # a counterexample is definite; pan stops after it
    if trunc:
        return "INCOMPLETE", trunc    # a search cut short proves nothing: never a PASS
    return "PASS", trunc


def save(cid, r):
    """Record one result in results.json and summary.md at once, so that a long batch
    that is stopped keeps what it finished. results.json keeps the latest result of every
    configuration, so a partial run (--only, --quick) updates summary.md without losing
    the rest; a lock file lets two runners share the results folder."""
    store_path = os.path.join(RES, "results.json")
    with open(os.path.join(tempfile.gettempdir(), "rwdir-spin-results.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        store = {}
        if os.path.exists(store_path):
            with open(store_path) as f:
                store = json.load(f)
        store[cid] = {k: r.get(k) for k in ("result", "kind", "states", "depth", "secs", "mem", "args", "mode", "expected")}
        with open(store_path + ".tmp", "w") as f:
            json.dump(store, f, indent=1, sort_keys=True)
        os.replace(store_path + ".tmp", store_path)
        write_summary(store)


def run_one(cfg, work):
    cid, title, gargs, mode, expected, _ = cfg
    d = os.path.join(work, cid)
    os.makedirs(d, exist_ok=True)
    nw = int(re.search(r"--nw (\d+)", gargs).group(1))
    if EXTRA:
        gargs = f"{gargs} {EXTRA}"
    base = dict(id=cid, title=title, args=gargs, mode=mode, expected=expected)
    rc, out, _ = sh([sys.executable, os.path.join(HERE, "gen_model.py")] + shlex.split(gargs) + ["-o", "model.pml"], d)
    if rc:
        return dict(base, result="ERROR", note=out[-500:])
    rc, out, _ = sh("spin -a model.pml", d)
    if rc or not os.path.exists(os.path.join(d, "pan.c")):
        return dict(base, result="ERROR", note=out[-500:])
    lease = " --ns " in f" {gargs} " or " --lease" in f" {gargs} "
    cflags = "-O2 -w -DMEMLIM=11000"
    runflags = "-m3000000"
    if mode.startswith("ltl:"):
        cflags += " -DCOLLAPSE" + (" -DNFAIR=3" if lease else "")
        runflags += f" -a -f -N {mode[4:]}"
    elif mode.startswith("bfs"):
        cflags += " -DSAFETY -DNOCLAIM -DBFS"
        if mode == "bfs-noassert":
            runflags += " -A"
        if mode == "bfs-noend":
            runflags += " -E"
    else:
        cflags += " -DSAFETY -DNOCLAIM -DCOLLAPSE"
    cflags += (" " + CC_EXTRA) if CC_EXTRA else ""
    runflags += (" " + PAN_EXTRA) if PAN_EXTRA else ""
    rc, out, _ = sh(f"cc {cflags} -o pan pan.c", d)
    if rc:
        return dict(base, result="ERROR", note=out[-500:])
    rc, out, secs = sh(f"./pan {runflags}", d, timeout=PAN_TIMEOUT)
    stored = re.search(r"([\d.e+]+) states, stored", out)
    depth = re.search(r"depth reached (\d+)", out)
    kind = re.search(r"pan:1: (.*?) \(at depth", out)
    mem = re.search(r"([\d.]+)\s+total actual memory usage", out)
    result, trunc = classify(out)
    res = dict(base, states=int(float(stored.group(1))) if stored else None,
               depth=int(depth.group(1)) if depth else None, secs=round(secs, 1),
               kind=kind.group(1) if kind else "", trunc=trunc, result=result,
               mem=round(float(mem.group(1))) if mem else None)
    if result == "INCOMPLETE":
        res["kind"] = "search not completed (depth or memory bound)"
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
        if TRAILS:
            shutil.copy(trail, os.path.join(RES, f"{cid}.model.pml.trail"))
            shutil.copy(os.path.join(d, "model.pml"), os.path.join(RES, f"{cid}.model.pml"))
        with open(os.path.join(RES, f"{cid}.trace.txt"), "w") as f:
            f.write(f"# {cid}: {title}\n# gen_model.py {gargs}  ({mode})\n")
            f.write(f"# {res['kind']}\n")
            # fixed-width columns: process | step
            for ln in lines:
                if " | " in ln:
                    who, what = ln.split(" | ", 1)
                    f.write(f"{who.strip():<5} {what}\n")
                else:
                    f.write(ln + "\n")
    return res


TRAILS = False


def write_summary(store):
    """results/summary.md from results.json's store, in the order of CONFIGS."""
    counts, mism = {}, 0
    with open(os.path.join(RES, "summary.md"), "w") as f:
        f.write("| id | configuration | gen_model.py options | check | states stored | depth | seconds | MB | result | expected |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|\n")
        for cfg in CONFIGS:
            r = store.get(cfg[0])
            if not r:
                continue
            ok = r["result"] == cfg[4]
            counts[r["result"]] = counts.get(r["result"], 0) + 1
            mism += not ok
            check = {"safety": "safety (assertions + deadlock)", "bfs": "safety, BFS",
                     "bfs-noassert": "deadlock only, BFS", "bfs-noend": "assertions, BFS (scenario)"}.get(
                cfg[3], cfg[3].replace("ltl:", "LTL ") + " (weak fairness)")
            res = (r["result"] + (f": {r['kind']}" if r.get("kind") else "")).replace("|", "\\|")
            states = f"{r['states']:,}" if isinstance(r.get("states"), int) else r.get("states")
            f.write(f"| {cfg[0]} | {cfg[1]} | `{cfg[2]}` | {check} | {states} | {r.get('depth')} | "
                    f"{r.get('secs')} | {r.get('mem')} | {res} | {cfg[4]}{'' if ok else ' **MISMATCH**'} |\n")
        f.write("\n" + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
                + f"; {mism} not as expected. \"MB\": pan's total memory; \"seconds\": the search alone.\n")


def main():
    global RES, EXTRA, PAN_EXTRA, CC_EXTRA, TRAILS, PAN_TIMEOUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only the small configurations")
    ap.add_argument("--all", action="store_true", help="also the largest variant runs")
    ap.add_argument("--only", default="", help="comma-separated configuration ids")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="configurations checked at once (default 2)")
    ap.add_argument("--keep", action="store_true", help="keep the build directory")
    ap.add_argument("--trails", action="store_true", help="copy each counterexample's Spin trail and model to results/")
    ap.add_argument("--gen", default="", help="extra gen_model.py options for every configuration (variants)")
    ap.add_argument("--tag", default="", help="write results to results/variants/TAG")
    ap.add_argument("--pan-extra", default="", help="extra pan options (e.g. -m50, to see INCOMPLETE)")
    ap.add_argument("--cc-extra", default="", help="extra C compiler options for pan")
    ap.add_argument("--timeout", type=float, default=PAN_TIMEOUT,
                    help="seconds one search may take before it is stopped (default 3600); "
                         "a search stopped so is an ERROR, never a pass")
    ap.add_argument("--list", action="store_true", help="list the configurations and exit")
    ap.add_argument("--summary", action="store_true", help="rewrite results/summary.md from results.json and exit")
    a = ap.parse_args()
    EXTRA, PAN_EXTRA, CC_EXTRA, TRAILS = a.gen, a.pan_extra, a.cc_extra, a.trails
    PAN_TIMEOUT = a.timeout
    if a.tag:
        RES = os.path.join(HERE, "results", "variants", a.tag)
    if a.summary:
        with open(os.path.join(RES, "results.json")) as f:
            write_summary(json.load(f))
        return
    if a.list:
        for c in CONFIGS:
            print(f"{c[0]:<11} {c[5]} {c[4]:<4} {c[3]:<10} gen_model.py {c[2]}")
        return
    for tool in ("spin", "cc"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found (Debian: apt-get install spin gcc)")
    os.makedirs(RES, exist_ok=True)
    work = tempfile.mkdtemp(prefix="rwdir-spin-")
    only = set(x for x in a.only.split(",") if x)
    unknown = only - {c[0] for c in CONFIGS}
    if unknown:
        sys.exit(f"unknown configuration(s): {', '.join(sorted(unknown))}")
    todo = []
    for cfg in CONFIGS:
        if only:
            if cfg[0] not in only:
                continue
        elif a.quick and cfg[5] != "q":
            continue
        elif not a.all and cfg[5] == "a":
            continue
        todo.append(cfg)
    # longest first, so that the last configurations do not run alone: the time of the
    # previous run where there is one, otherwise the tier
    prev = {}
    if os.path.exists(os.path.join(RES, "results.json")):
        with open(os.path.join(RES, "results.json")) as f:
            prev = json.load(f)
    todo.sort(key=lambda c: -((prev.get(c[0]) or {}).get("secs") or {"a": 1000, "f": 100, "q": 10}[c[5]]))
    rows, bad = {}, 0
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        futs = {ex.submit(run_one, cfg, work): cfg for cfg in todo}
        for fu in concurrent.futures.as_completed(futs):
            cfg = futs[fu]
            try:
                r = fu.result()
            except Exception as e:  # a timeout or a crash of the runner itself
                r = dict(id=cfg[0], result="ERROR", note=str(e))
            ok = r["result"] == cfg[4]
            bad += not ok
            rows[cfg[0]] = (cfg, r, ok)
            save(cfg[0], r)
            print(f"{cfg[0]:<11} {r['result']:<10} (expected {cfg[4]}) states={r.get('states')} "
                  f"depth={r.get('depth')} {r.get('secs')}s {r.get('kind', '')}  {cfg[1]}"
                  + (f"\n    {r['note']}" if r.get("note") else ""), flush=True)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("build directory kept:", work)
    print(f"{len(rows)} configurations, {bad} unexpected, {time.time() - t0:.0f}s")
    print(f"{len(rows) - bad} as expected, {bad} not")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
