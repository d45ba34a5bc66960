#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Drive an NBD server for the integration tests: several connections,
each keeping a queue of asynchronous requests, optionally ignoring
request errors.  Prints a line with what completed."""

import argparse
import sys
import threading
import time

import nbd


def run_conn(args, idx, results):
    h = nbd.NBD()
    h.connect_uri(args.uri)
    size = h.get_size()
    sent = ok = failed = 0
    inflight = 0
    buf = nbd.Buffer(args.size)
    pattern = bytes([(idx * 7 + 1) & 0xff]) * args.size
    buf = nbd.Buffer.from_bytearray(bytearray(pattern))
    ops = args.op.split(",")

    def done(err):
        nonlocal ok, failed, inflight
        inflight -= 1
        if err.value != 0:
            failed += 1
            err.value = 0     # handled here: do not fail the handle
        else:
            ok += 1
        return 1

    deadline = time.monotonic() + args.timeout
    while sent < args.count or inflight > 0:
        while sent < args.count and inflight < args.depth:
            off = ((idx * args.count + sent) * args.size) % (size - args.size + 1)
            off -= off % 4096
            op = ops[sent % len(ops)]
            if op == "write":
                h.aio_pwrite(buf, off, completion=done)
            elif op == "zero":
                h.aio_zero(args.size, off, completion=done)
            elif op == "trim":
                h.aio_trim(args.size, off, completion=done)
            else:
                raise SystemExit("unknown op " + op)
            sent += 1
            inflight += 1
        h.poll(1000)
        if time.monotonic() > deadline:
            results[idx] = ("timeout", sent, ok, failed)
            return
    h.shutdown()
    results[idx] = ("done", sent, ok, failed)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--depth", type=int, default=16)
    p.add_argument("--size", type=int, default=65536)
    p.add_argument("--count", type=int, default=64)
    p.add_argument("--op", default="write")
    p.add_argument("--timeout", type=float, default=60)
    args = p.parse_args()

    results = [None] * args.conns
    threads = [threading.Thread(target=run_conn, args=(args, i, results))
               for i in range(args.conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total_ok = sum(r[2] for r in results if r)
    total_failed = sum(r[3] for r in results if r)
    status = "done" if all(r and r[0] == "done" for r in results) else "timeout"
    print(f"status={status} ok={total_ok} failed={total_failed}")
    sys.exit(0 if status == "done" else 1)


if __name__ == "__main__":
    main()
