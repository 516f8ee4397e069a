#!/usr/bin/env python3
"""bench/planner/loop_rounds.py's re-measure rule: a layout whose rounds spread past the
limit is measured again, pass after pass while its middle rounds still spread, up to the
stated number of passes; one still spread then is reported unmeasurable, never dropped
(loop_report.py keeps it in the goal line and lists it). Stand-in measurements: no binary,
no timing."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "planner"))
import loop_report  # noqa: E402
import loop_rounds  # noqa: E402


class StandIn:
    """measure() for named layouts: each layout's walls in the order it is measured."""

    def __init__(self, series):
        self.series = {k: list(v) for k, v in series.items()}
        self.calls = {k: 0 for k in series}

    def __call__(self, binary, out, ranks, k, steps):
        name = k["name"]
        self.calls[name] += 1
        return self.series[name].pop(0), float("nan")


def layouts(*names):
    return [(n, 2, {"name": n}) for n in names]


def run(series, first_rounds=3, passes=loop_rounds.REMEASURE_PASSES):
    stand_in = StandIn(series)
    chosen = layouts(*series)
    walls = {n: [] for n in series}
    cpus = {n: [] for n in series}
    old = loop_rounds.measure
    loop_rounds.measure = stand_in
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            loop_rounds.run_rounds("b", "o", chosen, first_rounds, 1, walls, cpus)
            done, unmeasurable = loop_rounds.remeasure_spread("b", "o", chosen, first_rounds, 1,
                                                              walls, cpus, 0.20, passes=passes)
    finally:
        loop_rounds.measure = old
    return stand_in.calls, walls, done, unmeasurable


class Remeasure(unittest.TestCase):
    def test_middle_spread_leaves_a_quarter_out_at_each_end(self):
        self.assertAlmostEqual(loop_rounds.middle_spread([1.0, 2.0]), 1.0)
        # 6 rounds: the extremes out, as stop 30's rule
        self.assertAlmostEqual(loop_rounds.middle_spread([0.1, 1.0, 1.1, 1.2, 1.3, 9.0]), 0.3)
        # 9 rounds: two out at each end
        self.assertAlmostEqual(
            loop_rounds.middle_spread([0.1, 0.2, 1.0, 1.0, 1.1, 1.2, 1.2, 7.0, 9.0]), 0.2)

    def test_a_layout_that_settles_after_one_pass_is_measured_twice_over(self):
        calls, walls, done, unmeasurable = run({
            "steady": [1.0, 1.05, 1.1],
            "settles": [1.0, 1.9, 1.0, 1.0, 1.05, 1.02]})
        self.assertEqual(calls, {"steady": 3, "settles": 6})
        self.assertEqual(list(done), ["settles"])
        self.assertEqual(unmeasurable, [])

    def test_a_layout_still_spread_is_measured_again_until_its_middle_settles(self):
        # the first pass leaves 1.0..1.3 in the middle of six rounds (30%); the second (nine
        # rounds, two out at each end) 1.0..1.0: no third pass
        calls, walls, done, unmeasurable = run({
            "spread": [1.0, 1.5, 1.0, 1.3, 1.0, 1.0, 1.0, 1.0, 1.0, 9.9, 9.9, 9.9],
            "steady": [1.0, 1.0, 1.0]})
        self.assertEqual(calls["spread"], 9)
        self.assertEqual(len(done["spread"][1]), 6)
        self.assertEqual(unmeasurable, [])

    def test_one_still_spread_after_the_last_pass_is_unmeasurable_and_kept(self):
        bad = [1.0, 2.0, 3.0] * 4
        calls, walls, done, unmeasurable = run({"bad": bad, "steady": [1.0, 1.0, 1.0]}, passes=3)
        self.assertEqual(calls["bad"], 12)
        self.assertEqual(unmeasurable, ["bad"])
        self.assertEqual(sorted(walls["bad"]), sorted(bad))

    def test_the_report_keeps_an_unmeasurable_layout_in_the_goal_line_and_lists_it(self):
        chosen = layouts("a", "b")
        preds = {"a": 1.0, "b": 1.0}
        walls = {"a": [1.0, 1.0, 1.0], "b": [2.0, 1.0, 3.0]}
        cpus = {"a": [1.0] * 3, "b": [2.0] * 3}
        out = io.StringIO()
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(out):
            loop_report.report(d, chosen, preds, walls, cpus, 3, 0.20, {}, None, 0.0, ["b"])
        text = out.getvalue()
        self.assertIn("over 2 layouts", text)
        self.assertIn("unmeasurable in this window (middle rounds still spread past 20% after "
                      "every re-measure pass): b", text)
        self.assertIn("wall, without the 1 unmeasurable layouts: mean |error| 0.0%, max 0.0% (a) "
                      "over 1 layouts", text)


if __name__ == "__main__":
    unittest.main()
