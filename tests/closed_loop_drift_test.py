#!/usr/bin/env python3
"""bench/planner/drift_check.py's rules: the band read from a profile, which layout runs a
reference check outside the band flags, and the monitor's bookkeeping (a stand-in reference
measurement: no binary, no timing)."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "planner"))
import drift_check as dc  # noqa: E402

BANDS = {"fp32": (0.150, 0.95, 1.05), "bf16": (0.060, 0.9, 1.1)}


class Bands(unittest.TestCase):
    def test_reads_the_band_of_each_measured_precision(self):
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write("[hardware]\nname = \"local\"\nreference_step_s = 1.5e-01\n"
                    "step_low_fp32 = 0.95\nstep_high_fp32 = 1.05\nreference_step_s_bf16 = 0\n"
                    "step_low_bf16 = 0\nstep_high_bf16 = 0\n")
        try:
            self.assertEqual(dc.read_bands(f.name), {"fp32": (0.15, 0.95, 1.05)})
        finally:
            os.unlink(f.name)

    def test_outside_is_beyond_either_end(self):
        self.assertFalse(dc.outside(0.150 * 1.04, BANDS["fp32"]))
        self.assertTrue(dc.outside(0.150 * 1.06, BANDS["fp32"]))
        self.assertTrue(dc.outside(0.150 * 0.94, BANDS["fp32"]))


class Flags(unittest.TestCase):
    def test_a_check_outside_flags_the_runs_next_to_it_of_its_precision(self):
        events = [("check", "fp32", 0.150), ("check", "bf16", 0.060),
                  ("run", "1 rank", "fp32"), ("run", "bf16 1 rank", "bf16"),
                  ("check", "fp32", 0.180), ("check", "bf16", 0.061),
                  ("run", "dp2 z0", "fp32"),
                  ("check", "fp32", 0.151), ("check", "bf16", 0.060),
                  ("run", "tp2", "fp32")]
        flags = dc.flag_runs(events, BANDS)
        # before the moved check and after it; the run after the next (good) check is not
        self.assertEqual(flags["1 rank"], [True])
        self.assertEqual(flags["dp2 z0"], [True])
        self.assertEqual(flags["tp2"], [False])
        self.assertEqual(flags["bf16 1 rank"], [False])

    def test_a_layout_is_listed_when_most_of_its_rounds_were_out_of_regime(self):
        self.assertEqual(dc.flagged_layouts({"a": [True, True, False], "b": [True, False, False],
                                             "c": [False]}), ["a"])

    def test_a_precision_without_a_band_is_never_flagged(self):
        flags = dc.flag_runs([("check", "fp32", 0.3), ("run", "bf16 x", "bf16")],
                             {"fp32": BANDS["fp32"]})
        self.assertEqual(flags["bf16 x"], [False])


class Monitor(unittest.TestCase):
    def test_checks_every_n_runs_and_reports_the_layouts_without_the_flagged(self):
        readings = iter([0.060, 0.150, 0.060, 0.200, 0.060, 0.150])  # bf16, fp32 each check
        m = dc.DriftMonitor(lambda prec: next(readings), BANDS, every=2)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            m.check("start")
            for name in ("1 rank", "bf16 1 rank", "dp2 z0", "tp2"):
                m.ran(name)
            flagged = m.summary({"1 rank": 0.3, "bf16 1 rank": 0.01, "dp2 z0": 0.2, "tp2": 0.05})
        self.assertEqual(sum(1 for e in m.events if e[0] == "check"), 6)
        self.assertEqual(flagged, ["1 rank", "dp2 z0", "tp2"])
        self.assertIn("MOVED", out.getvalue())
        self.assertIn("1 of 6 reference checks outside", out.getvalue())
        self.assertIn("mean |error| 1.0%", out.getvalue())


if __name__ == "__main__":
    unittest.main()
