#!/usr/bin/env python3
"""Reduces a heaptrack profile of the operator (podset-bench --heap-profile) to the table in
BENCHMARKS.md: the bytes live at the steady reading, by what holds them.

    heaptrack_print --flamegraph-cost-type leaked -F stacks.txt target/bench/heap/w5-100000pods.gz
    bench/heap-table.py stacks.txt 100000 10000     # the stacks, pods, PodSets

Each allocation's stack goes to the first concept whose pattern matches, walking from the
allocation outwards; the PodSet store is recognised anywhere in the stack, because with LTO its
clones are inlined into the frames of the stream around it.
"""
import collections
import re
import sys

STORE = "PodSet store (kube's reflector: copies and map)"
RULES = [
    ("pod cache (cached pods, their index)", r"\((index|pod|cache)\.rs\)"),
    ("interned names", r"name \(intern\.rs\)"),
    ("kube's predicate filter", r"\(predicate\.rs\)"),
    ("kube's controller: requeue timers, queued ObjectRefs",
     r"schedule_message|pop_queue_message|delay_queue|scheduler"),
    ("event recorder (series record)", r"\(events\.rs\)"),
    ("status-write memo, expectations, backoff", r"\((expectations|backoff)\.rs\)"),
    ("HTTP connections (hyper, rustls)",
     r"hyper|http1|\(conn\.rs\)|connector|rustls|\(client\.rs\)|\(dispatch\.rs\)|bytes_mut"),
    ("runtime, threads, startup", r"tokio|rtld|dl-init|stack_overflow|spawnhook|lifecycle"),
]


def concept(stack):
    if "apply_watcher_event" in stack:
        return STORE
    for frame in reversed(stack.split(";")):
        for name, pattern in RULES:
            if re.search(pattern, frame):
                return name
    return "other"


def main(path, pods, podsets):
    live = collections.Counter()
    for line in open(path):
        stack, _, size = line.rstrip("\n").rpartition(" ")
        live[concept(stack)] += int(size)
    print(f"live heap: {sum(live.values()) / 2**20:.2f} MiB")
    print("| what | MiB | bytes a pod | bytes a PodSet |")
    print("| --- | --- | --- | --- |")
    for name in [STORE] + [n for n, _ in RULES] + ["other"]:
        b = live[name]
        print(f"| {name} | {b / 2**20:.2f} | {b / pods:.0f} | {b / podsets:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
