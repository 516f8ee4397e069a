#!/usr/bin/env python3
"""bench/planner/microbatch_probe.py: the calibration's per-microbatch fit (a copy of
reference_steps.cpp's fit_step_factor) and why a bracket of the four counts reads the figure
where the calibration's one pass does not. Stand-in steps: no binary, no timing."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "planner"))
import microbatch_probe as mp  # noqa: E402

# Kernel predictions of stop 39's calibration (bench39_calibrate.log, its last fp32 round), seconds.
KERNELS = {1: 0.1247, 8: 0.1339, 2: 0.1247, 4: 0.1279}
F, C = 1.1, 3e-10  # C x W: about 1 ms per microbatch


def step(m):
    return F * KERNELS[m] + m * mp.refit_profile.WEIGHTS * C


class Fit(unittest.TestCase):
    def test_exact_steps_give_back_the_factor_and_the_cost(self):
        f, c = mp.fit_step_factor([(m, KERNELS[m], step(m)) for m in mp.COUNTS])
        self.assertAlmostEqual(f, F, places=9)
        self.assertAlmostEqual(c / C, 1.0, places=6)

    def test_one_percent_on_the_eight_microbatch_run_moves_the_cost_by_a_quarter(self):
        # the figure is a slope: m8's step differs from m1's by ~7 ms of ~150, so a host
        # that runs 1% slower for that one run moves c by about 24%
        f, c = mp.fit_step_factor([(m, KERNELS[m], step(m) * (1.01 if m == 8 else 1.0))
                                   for m in mp.COUNTS])
        self.assertGreater(c / C, 1.2)
        self.assertLess(c / C, 1.3)

    def test_a_slower_run_below_the_kernels_floors_the_cost(self):
        f, c = mp.fit_step_factor([(m, KERNELS[m], step(m) * (0.95 if m == 8 else 1.0))
                                   for m in mp.COUNTS])
        self.assertLess(c, 1e-11)


class Bracket(unittest.TestCase):
    def test_a_drift_linear_over_the_round_cancels_in_the_bracket_only(self):
        # the host slows 2% a run over the round's eight runs (1 8 2 4 4 2 8 1)
        order = list(mp.COUNTS) + list(mp.COUNTS)[::-1]
        runs = [(m, step(m) * (1 + 0.02 * i)) for i, m in enumerate(order)]
        calibrated, bracket = mp.round_figures(KERNELS, runs)
        self.assertGreater(abs(calibrated / C - 1), 0.2)
        # the bracket's means all sit at the round's middle (1 + 0.02 x 3.5): every count
        # scaled alike, so the cost reads as the host of that minute reads every figure
        self.assertAlmostEqual(bracket / C, 1.07, places=6)


if __name__ == "__main__":
    unittest.main()
