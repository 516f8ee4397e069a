#!/usr/bin/env python3
"""bench/planner/quiet_run.py's rules: the summary keeps the goal lines of the two phases'
outputs, and the duration estimate counts every run the phases will start (stand-in
predictions and start-up: no binary, no timing)."""
import contextlib
import io
import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "planner"))
import brute_force as bf  # noqa: E402
import quiet_run as qr  # noqa: E402

LOOP = """  round 1/3 1 rank                     wall    160.2 ms
1 rank                   ranks 1  predicted    154.0 ms  measured wall    160.2 ms (-3.9%)
round-to-round spread of one layout's wall (max/min - 1): median 5.0%, max 22.7%; 1 layouts
wall: mean |error| 8.5%, max 29.1%; cpu-time estimate: mean 8.7%, max 25.9%; over 51 layouts
wall, without the calibration's three reference layouts: mean |error| 8.7%, max 29.1%
drift: 17 of 30 reference checks outside the calibration's band
wall, the layouts measured within the calibration's band only: mean |error| 13.6%, max 29.1%
"""
BRUTE = """#  1 {'dp': 2}  predicted    87.7 ms  wall    91.5  cpu-est    90.0
wall: planner's #1 measured 91.5 ms (rank 3 of 138 measured); first choice +2.0% (goal <= 5%)
cpu-time estimate: planner's #1 measured 90.0 ms (rank 2 of 138 measured)
re-measured (3 interleaved rounds of 10 steps): planner's #1 91.4 ms; first choice +1.8%
"""


class Summary(unittest.TestCase):
    def test_keeps_the_goal_lines_of_both_phases_and_nothing_else(self):
        got = qr.summary(LOOP, BRUTE)
        self.assertEqual([g.split(":")[0] for g in got],
                         ["wall", "wall, without the calibration's three reference layouts",
                          "round-to-round spread of one layout's wall (max/min - 1)", "drift",
                          "wall, the layouts measured within the calibration's band only",
                          "wall", "re-measured (3 interleaved rounds of 10 steps)"])
        self.assertIn("first choice +1.8%", got[-1])
        self.assertFalse(any("cpu-time estimate: planner" in g for g in got))


def shape_line(prec, name, rows, ratios):
    return (f"{prec} {name:9} N {rows} in 256 out 768: fwd 1.0 bwd_in 1.0 bwd_w 1.0 ms, model "
            f"2.0 ms (measured/model {ratios[0]:.2f} {ratios[1]:.2f} {ratios[2]:.2f})\n")


class ShapeDeparture(unittest.TestCase):
    def test_the_largest_departure_from_the_1024_row_ratio_per_precision(self):
        text = (shape_line("fp32", "qkv", 1024, (0.40, 0.40, 0.50))
                + shape_line("fp32", "qkv", 256, (0.42, 0.30, 0.50))
                + shape_line("fp32", "fc", 1024, (0.40, 0.40, 0.40))
                + shape_line("fp32", "fc", 128, (0.44, 0.40, 0.40))
                + shape_line("bf16", "qkv", 1024, (0.30, 0.30, 0.30))
                + shape_line("bf16", "qkv", 512, (0.33, 0.30, 0.30)))
        got = qr.shape_departure(text)
        self.assertAlmostEqual(got["fp32"][0], 0.30 / 0.40 - 1)
        self.assertEqual(got["fp32"][1], "qkv bwd_in at 256 rows")
        self.assertAlmostEqual(got["bf16"][0], 0.10)

    def test_no_reference_rows_no_figure(self):
        self.assertEqual(qr.shape_departure(shape_line("fp32", "qkv", 256, (0.4, 0.4, 0.4))), {})


class Estimate(unittest.TestCase):
    def setUp(self):
        self.saved = (qr.startup_seconds, qr.predict, qr.brute_candidates)
        qr.startup_seconds = lambda binary, out: 0.5
        qr.predict = lambda binary, profile, ranks, k: 0.1
        qr.brute_candidates = lambda binary, profile, arch: [
            {"predicted": {"step_time_s": t}} for t in (0.08, 0.09, 0.12)]

    def tearDown(self):
        qr.startup_seconds, qr.predict, qr.brute_candidates = self.saved

    def test_counts_every_round_check_and_finalist(self):
        only = ["1 rank", "tp2"]
        start, n, loop, nb, brute = qr.estimate("mt", "out", "p.toml", only, 10, 3, 6, None)
        self.assertEqual((start, n, nb), (0.5, 2, 3))
        # 2 layouts x 3 rounds x (0.5 + 10 x 0.1), then 2 x 2 drift checks of 8 steps.
        self.assertAlmostEqual(loop, 2 * 3 * 1.5 + 4 * (0.5 + 0.8))
        # 3 single passes of 6 steps, then 3 finalists (all there are) x 4 brackets of two
        # runs of 20 steps at the fastest prediction.
        single = sum(0.5 + 6 * t for t in (0.08, 0.09, 0.12))
        self.assertAlmostEqual(brute, single + 3 * 4 * 2 * (0.5 + 20 * 0.08))

    def test_the_brute_force_limit_and_every_layout_without_only(self):
        _, n, _, nb, _ = qr.estimate("mt", "out", "p.toml", None, 10, 3, 6, 2)
        self.assertEqual((n, nb), (len(qr.LAYOUTS), 2))


class FinalistVerdict(unittest.TestCase):
    """Stops 42-47's rule (kept to read their logs; the brute force now runs brackets,
    tests/finalist_brackets_test.py): the medians of rotated rounds, and 'noise' when the
    rounds disagree about the 5% goal."""

    def test_a_gap_every_round_shows_is_beyond_the_goal(self):
        # Stop 42: the first choice against tp2 pp2 gpipe m4, three rounds.
        gap, lo, hi, verdict = bf.finalist_verdict([73.1, 70.2, 72.9], [64.9, 63.2, 64.7])
        self.assertEqual(verdict, "beyond")
        self.assertAlmostEqual(gap, 72.9 / 64.7 - 1)
        self.assertAlmostEqual(lo, 70.2 / 63.2 - 1)
        self.assertAlmostEqual(hi, 72.9 / 64.7 - 1)

    def test_a_gap_one_round_contradicts_is_noise(self):
        self.assertEqual(bf.finalist_verdict([73.1, 60.0, 72.9, 71.0, 70.5],
                                             [64.9, 63.2, 64.7, 66.0, 64.0])[3], "noise")

    def test_medians_within_five_percent_are_within_whatever_one_round_says(self):
        self.assertEqual(bf.finalist_verdict([66.0, 60.0, 75.0], [64.9, 63.2, 64.7])[3],
                         "within")


class FinalistSplit(unittest.TestCase):
    """The first choice's gap over the best finalist, split into work (cpu-time estimate)
    and idle (wall less work), from the medians of their rounds."""

    def test_a_gap_of_idle_cores_is_idle_not_work(self):
        # The same work, 5 ms more wall: waits, bubble or placement, not compute.
        work, idle = bf.finalist_split([0.065, 0.066, 0.064], [0.059, 0.060, 0.059],
                                       [0.060, 0.061, 0.059], [0.059, 0.060, 0.058])
        self.assertAlmostEqual(work, 0.059 / 0.059 - 1)
        self.assertAlmostEqual(idle, (0.065 - 0.059) - (0.060 - 0.059))

    def test_runs_without_cpu_figures_are_left_out_and_none_gives_nan(self):
        nan = float("nan")
        work, idle = bf.finalist_split([0.07, 0.06], [nan, 0.06], [0.06, 0.06], [0.05, 0.05])
        self.assertAlmostEqual(work, 0.06 / 0.05 - 1)
        self.assertTrue(math.isnan(bf.finalist_split([0.07], [nan], [0.06], [0.05])[0]))


class FinalistRuns(unittest.TestCase):
    """The finalists' runs: FINALIST_STEPS steps each, the --realtime prefix on every run, each
    finalist's work, idle, sleeps and tp wait, and the gap's split printed under the verdict."""

    def setUp(self):
        self.saved = (bf.measure, bf.loadavg)
        self.calls = []
        walls = {1: 0.066, 2: 0.060, 3: 0.063}

        def fake(binary, out, ranks, k, steps, prefix=(), detail=None):
            self.calls.append((k["id"], steps, tuple(prefix)))
            detail.update(sleeps=45.0 if k["id"] == 1 else 10.0, tp_wait_s=0.0104)
            return walls[k["id"]], 0.059
        bf.measure, bf.loadavg = fake, lambda: 1.0

    def tearDown(self):
        bf.measure, bf.loadavg = self.saved

    def test_every_finalist_run_has_the_steps_and_the_prefix(self):
        results = [(i, 0.06, 0.06, 0.059, {"id": i + 1}) for i in range(3)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            bf.remeasure_finalists("mt", "out", results, prefix=["chrt", "-f", "10"])
        # a gap of 10% in every bracket: beyond the goal after the first 4 brackets
        self.assertEqual(len(self.calls), 3 * 2 * bf.fb.BRACKETS)
        self.assertTrue(all(c[1] == bf.FINALIST_STEPS == 20 for c in self.calls))
        self.assertTrue(all(c[2] == ("chrt", "-f", "10") for c in self.calls))
        text = out.getvalue()
        self.assertIn("first choice +10.0%", text)
        self.assertIn("the gap in two: work +0.0% (cpu-time estimate", text)
        self.assertIn("idle +6.0 ms", text)
        self.assertIn("idle 7.0  sleeps 45 per rank and step  tp wait 10.4 ms (rank 0)", text)


if __name__ == "__main__":
    unittest.main()
