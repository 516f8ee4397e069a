#!/usr/bin/env python3
"""bench/planner/rank_sleeps.py's attribution of rank sleeps to trace phases, on a stand-in
trace and stand-in sched_switch lines (no binary, no perf, no timing)."""
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "planner"))
import rank_sleeps as rs  # noqa: E402

T0 = 100.0  # the trace's clock origin on the steady clock, seconds


def span(rank, name, cat, begin_ms, dur_ms):
    return {"ph": "X", "tid": rank, "pid": 0, "name": name, "cat": cat,
            "ts": begin_ms * 1e3, "dur": dur_ms * 1e3}


def stand_in_trace():
    """Two stages of two ranks, three 100 ms steps; in each: stage 0 F 0-10 ms, stage 1
    F 10-20, B 20-30, W 30-50 beside stage 0's B 30-50, stage 0 W 50-60; receives between."""
    ev = [{"name": "clock_origin", "ph": "M", "args": {"steady_s": T0}}]
    for step in range(3):
        o = step * 100
        for r in (0, 1):
            ev.append(span(r, f"step {step + 1}", "step", o, 100))
            ev += [span(r, "0F0", "compute", o, 10), span(r, "0RECV_B0", "comm", o + 10, 20),
                   span(r, "0B0", "compute", o + 30, 20), span(r, "0W0", "compute", o + 50, 10)]
        for r in (2, 3):
            ev.append(span(r, f"step {step + 1}", "step", o, 100))
            ev += [span(r, "1RECV_F0", "comm", o, 10), span(r, "1F0", "compute", o + 10, 10),
                   span(r, "1B0", "compute", o + 20, 10), span(r, "1W0", "compute", o + 30, 20)]
    return {"traceEvents": ev}


def switch(tid, t_ms, prev_comm, state, next_comm, next_tid):
    return (f"{tid} {T0 + t_ms / 1e3:.6f}: prev_comm={prev_comm} prev_pid={tid} prev_prio=120 "
            f"prev_state={state} ==> next_comm={next_comm} next_pid={next_tid} next_prio=120")


# In step 3 (the window after the two warm-up steps starts at 200 ms): rank 1 sleeps 0.5 ms
# in its F with rank 0 computing and stage 1 in its receive (a partner late while the stage
# computes alone); rank 0 sleeps 2 ms in its B while stage 1 runs W (the co-run); rank 2
# sleeps in its receive; a progress thread that started under rank 3's name (and renamed
# itself) sleeps in the window.
# A sleep in step 1 (warm-up) is not counted.
LINES = [
    switch(11, 5, "mt rank 1", "S", "swapper/1", 0),
    switch(0, 5.2, "swapper/1", "R", "mt rank 1", 11),
    switch(11, 205, "mt rank 1", "S", "swapper/1", 0),
    switch(0, 205.5, "swapper/1", "R", "mt rank 1", 11),
    switch(10, 235, "mt rank 0", "S", "mt rank 2", 12),
    switch(12, 237, "mt rank 2", "R", "mt rank 0", 10),
    switch(12, 201, "mt rank 2", "S", "swapper/0", 0),
    switch(0, 210, "swapper/0", "R", "mt rank 2", 12),
    switch(13, 100.1, "meshtrain", "R", "mt rank 3", 13),
    switch(20, 100.05, "mt rank 3", "S", "swapper/0", 0),
    switch(20, 203, "mt progress", "S", "swapper/0", 0),
]


def read_stand_in_trace():
    """rank_sleeps.read_trace of stand_in_trace(), written to a file as --trace writes it."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(stand_in_trace(), f)
    try:
        return rs.read_trace(f.name, 2)
    finally:
        os.unlink(f.name)


class Attribution(unittest.TestCase):
    def rows(self):
        phases, stage, window, steps = read_stand_in_trace()
        self.assertEqual(steps, 1)
        self.assertEqual(stage, {0: 0, 1: 0, 2: 1, 3: 1})
        switches, rank_of = rs.read_switches(sorted(LINES, key=lambda l: float(l.split()[1][:-1])))
        return rank_of, rs.attribute(phases, stage, window, switches, rank_of)

    def test_a_thread_is_named_by_its_last_name(self):
        rank_of, _ = self.rows()
        self.assertEqual(rank_of, {10: 0, 11: 1, 12: 2, 13: 3})

    def test_each_sleep_lands_in_its_phase_and_company(self):
        _, rows = self.rows()
        counts = {k: v[0] for k, v in rows.items()}
        self.assertEqual(counts, {
            ("F (stage collective)", "stage-mate computing, other stage idle"): 1,
            ("B (stage collective)", "stage-mate computing, other stage computing"): 1,
            ("RECV_F", "other stage computing"): 1,
        })
        lone = rows[("F (stage collective)", "stage-mate computing, other stage idle")]
        self.assertAlmostEqual(lone[1], 0.5e-3, places=6)
        corun = rows[("B (stage collective)", "stage-mate computing, other stage computing")]
        self.assertAlmostEqual(corun[1], 2e-3, places=6)


def cpu_switch(cpu, tid, t_ms, prev_comm, state, next_comm, next_tid):
    return switch(tid, t_ms, prev_comm, state, next_comm, next_tid).replace(
        f"{tid} ", f"{tid} [{cpu:03d}] ", 1)


class LoneStageOccupancy(unittest.TestCase):
    """Step 3's stage 0 F (200-210 ms) computes alone: ranks 0 and 1 both run 200-204 on
    cpus 0 and 1; rank 1 is preempted and runs on cpu 0 after rank 0 yields it 204-206
    (stacked: rank 0 runnable on cpu 0); rank 0 sleeps 206-207 while rank 1 runs; both run
    again 207-210."""

    def occupancy(self):
        lines = [
            cpu_switch(0, 0, 200, "swapper/0", "R", "mt rank 0", 10),
            cpu_switch(1, 0, 200, "swapper/1", "R", "mt rank 1", 11),
            cpu_switch(1, 11, 203.5, "mt rank 1", "R", "cc1plus", 99),
            cpu_switch(1, 99, 203.6, "cc1plus", "S", "swapper/1", 0),
            cpu_switch(0, 10, 204, "mt rank 0", "R", "mt rank 1", 11),
            cpu_switch(0, 11, 206, "mt rank 1", "R", "mt rank 0", 10),
            cpu_switch(1, 0, 206, "swapper/1", "R", "mt rank 1", 11),
            cpu_switch(0, 10, 206, "mt rank 0", "S", "swapper/0", 0),
            cpu_switch(0, 0, 207, "swapper/0", "R", "mt rank 0", 10),
            cpu_switch(0, 10, 210, "mt rank 0", "S", "swapper/0", 0),
            cpu_switch(1, 11, 210, "mt rank 1", "S", "swapper/1", 0),
        ]
        phases, stage, window, _ = read_stand_in_trace()
        switches, rank_of = rs.read_switches(lines)
        self.assertEqual(switches[0][4], 0)
        spent = rs.lone_stage_occupancy(phases, stage, window, switches, rank_of)
        return {k: round(v * 1e3, 6) for k, v in spent.items() if v > 0}

    def test_the_pair_is_read_both_running_stacked_and_waiting(self):
        got = self.occupancy()
        self.assertEqual(got["both running"], 3.5 + 3)
        self.assertEqual(got["one running, its partner waiting on the same cpu (stacked)"], 2)
        self.assertEqual(got["one running, its partner asleep (a collective's wait)"], 1)
        self.assertEqual(got["one running, its partner preempted on the other cpu"], 0.5)


if __name__ == "__main__":
    unittest.main()
