#!/bin/bash
# Traces 50 ms of contended writers with ftrace (system calls, switches, wake-ups) for
# docs/probes/grant_trace.py. Not part of the build; a probe behind
# docs/notes/contention.md section 23. Needs root and /sys/kernel/tracing.
#   COMM=PREFIX grant_trace.sh OUT COMMAND...
# COMM: the first characters of the traced processes' names (ftrace keeps 15), e.g.
# `processes-` for the bench's writer role (see contention.md section 23 for the loop
# that runs it) or `fifo_files` for docs/probes/fifo_files.c. COMMAND runs in the
# background; the trace starts 0.5 s after it and lasts 50 ms; OUT gets the trace.
set -eu
out=$1
shift
T=/sys/kernel/tracing
echo 0 >$T/tracing_on
echo >$T/trace
echo 8192 >$T/buffer_size_kb
echo 0 >$T/events/enable
for e in raw_syscalls/sys_enter raw_syscalls/sys_exit; do
  echo "comm ~ \"$COMM*\"" >$T/events/$e/filter
  echo 1 >$T/events/$e/enable
done
echo "prev_comm ~ \"$COMM*\" || next_comm ~ \"$COMM*\"" >$T/events/sched/sched_switch/filter
echo 1 >$T/events/sched/sched_switch/enable
echo "comm ~ \"$COMM*\"" >$T/events/sched/sched_wakeup/filter
echo 1 >$T/events/sched/sched_wakeup/enable
"$@" >/dev/null &
sleep 0.5
echo 1 >$T/tracing_on
sleep 0.05
echo 0 >$T/tracing_on
wait
cat $T/trace >"$out"
echo 0 >$T/events/enable
for e in raw_syscalls/sys_enter raw_syscalls/sys_exit sched/sched_switch sched/sched_wakeup; do
  echo 0 >$T/events/$e/filter
done
