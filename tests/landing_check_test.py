#!/usr/bin/env python3
"""bench/landing_check.py's argument parsing, its spread rule and the figures it reads from
the benchmarks' output (no build, no benchmark run: the timings themselves are no test)."""
import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "landing_check", os.path.join(HERE, "..", "bench", "landing_check.py"))
lc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lc)


def refused(argv):
    """The exit status and stderr of a refused parse."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            lc.parse_args(argv)
        except SystemExit as e:
            return e.code, err.getvalue()
    return None, err.getvalue()


class Arguments(unittest.TestCase):
    def test_defaults(self):
        a = lc.parse_args(["main"])
        self.assertEqual((a.old_rev, a.rounds, a.keep_worktree, a.skip), ("main", 5, False, []))

    def test_rounds_and_skip(self):
        a = lc.parse_args(["HEAD~3", "--rounds", "7", "--skip", "moe"])
        self.assertEqual((a.old_rev, a.rounds, a.skip), ("HEAD~3", 7, ["moe"]))

    def test_refusals_exit_2_naming_the_problem(self):
        for argv, needle in [([], "OLD_REV"), (["main", "--rounds", "1"], "at least 2"),
                             (["main", "--rounds", "x"], "invalid int"),
                             (["main", "--skip", "step", "--skip", "moe"], "nothing to run"),
                             (["main", "--skip", "gemm"], "invalid choice"),
                             (["main", "--bogus"], "unrecognized")]:
            code, err = refused(argv)
            self.assertEqual(code, 2, argv)
            self.assertIn(needle, err, argv)


class SpreadRule(unittest.TestCase):
    def test_a_slowdown_beyond_both_spreads_is_flagged(self):
        ratio, s, v = lc.verdict([100, 101, 102], [110, 111, 112])
        self.assertAlmostEqual(ratio, 111 / 101)
        self.assertAlmostEqual(s, 2 / 101)  # the old side's, the larger
        self.assertEqual(v, "slower")

    def test_a_slowdown_inside_a_noisy_side_is_not(self):
        # The same 10% shift, but the old side's rounds range over 20%.
        self.assertEqual(lc.verdict([90, 100, 110], [110, 111, 112])[2], "within spread")
        self.assertEqual(lc.verdict([100, 101, 102], [95, 111, 130])[2], "within spread")

    def test_a_steady_old_side_does_not_hide_a_noisy_new_one(self):
        # The old side never varied; the new side's own 10.9% spread covers its 10%.
        self.assertEqual(lc.verdict([100, 100, 100], [100, 110, 112])[2], "within spread")
        self.assertEqual(lc.verdict([100, 100, 100], [109, 110, 111])[2], "slower")

    def test_faster_is_reported_too(self):
        self.assertEqual(lc.verdict([100, 101, 102], [80, 81, 82])[2], "faster")

    def test_summary_is_min_median_max(self):
        self.assertEqual(lc.summary([3, 1, 2, 10]), (1, 2.5, 10))


class Figures(unittest.TestCase):
    def test_step_time_is_the_median_after_the_warm_up_step(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            recs = [{"event": "run"}, {"step": 1, "step_time_s": 9.0},
                    {"step": 2, "step_time_s": 0.2}, {"event": "memory", "step_time_s": 5},
                    {"step": 3, "step_time_s": 0.4}, {"step": 4, "step_time_s": 0.3}]
            with open(path, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in recs))
            self.assertAlmostEqual(lc.step_time(path), 0.3)
            with open(path, "w") as f:
                f.write(json.dumps({"step": 1, "step_time_s": 1.0}) + "\n")
            with self.assertRaises(ValueError):
                lc.step_time(path)

    def test_moe_rows_as_bench_moe_layer_prints_them(self):
        out = ("llama MoE layer ... load average 1.00\n"
               "  prec  side          ms     GF/s    MFU x dense\n"
               "  fp32 GEMM peak 160.0 GFLOP/s per thread (oneDNN sgemm, ...)\n"
               "  %-5s %-6s %9.2f %8.0f %6.3f %7.2f\n" % ("fp32", "dense", 12.5, 100, 0.6, 1)
               + "  %-5s %-6s %9.2f %8.0f %6.3f %7.2f\n" % ("fp32", "layer", 20.25, 60, 0.4, 0.62)
               + "  %-5s %-6s %9.2f %8.0f %6.3f %7.2f\n" % ("bf16", "loop", 7.0, 200, 0.3, 1.1)
               + "load average after: 1.00\n")
        self.assertEqual(lc.moe_figures(out), {"moe fp32 dense": 12.5, "moe fp32 layer": 20.25,
                                               "moe bf16 loop": 7.0})


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
