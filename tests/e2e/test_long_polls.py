#!/usr/bin/env python3
"""Long polls: the demo's ground truth for polls that hold their worker (--long-poll-tasks).

The spinning task holds its worker ~20 ms on the CPU every ~250 ms, the sleeping one ~15 ms
off the CPU (std::thread::sleep) every ~400 ms; each writes a "long_poll" line per poll with
its thread and CLOCK_MONOTONIC start and end. Detection against long_polls.jsonl is checked
against these lines (docs/design.md#long-polls).
"""
import statistics
import time

from harness import Demo, run_all, test

TRUTH = {"spin": (20e6, 250e6), "sleep": (15e6, 400e6)}


def truth_lines(demo, kind):
    return [l for l in demo.lines("long_poll") if l["kind"] == kind]


@test
def demo_long_poll_truth():
    """Each kind's polls last what they should, at the rate they should, on worker threads;
    without the flag the demo writes none (other tests see the same demo)."""
    plain = Demo(workers=2, mode="mix")
    d = Demo("--long-poll-tasks", "1", workers=2, mode="mix")
    try:
        time.sleep(4)
        out = []
        for kind, (dur, period) in TRUTH.items():
            lines = truth_lines(d, kind)
            durs = [l["end_ns"] - l["start_ns"] for l in lines]
            assert len(lines) >= 0.7 * 4e9 / (period + dur), f"{kind}: only {len(lines)} polls"
            med = statistics.median(durs)
            # Wall time: a shared machine may stretch a spin, never shorten it.
            assert dur <= med <= 2 * dur, f"{kind}: median {med / 1e6:.1f} ms"
            assert all(l["tid"] != d.pid for l in lines), f"{kind}: a poll on the main thread"
            out.append(f"{kind} {len(lines)} polls, median {med / 1e6:.1f} ms")
        assert not plain.lines("long_poll"), "the demo wrote long polls without the flag"
        return "; ".join(out)
    finally:
        d.stop()
        plain.stop()


if __name__ == "__main__":
    run_all()
