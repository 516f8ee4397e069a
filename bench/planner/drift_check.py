"""The closed loop's drift check: between batches of layouts, the calibration's own
reference step is run again and compared with the band the calibration's rounds read for it
(profile fields reference_step_s[_bf16], step_low_*, step_high_*: plan/calibration_rounds.h).
A check outside the band means the machine moved beyond what the calibration saw; the layout
runs next to such a check are flagged, and a layout whose median comes from flagged runs is
reported apart instead of silently mixing two regimes of the machine into one error figure.
Nothing is rescaled: the reference step is a measurement of the calibration's components,
never fitted to the layouts' steps.
"""
import statistics

# The calibration's reference step (plan/reference_steps.cpp): one rank, one thread, the
# closed loop's medium model in one microbatch, 8 steps, the median of steps 3-8.
REFERENCE_EXTRA = ["--threads", "1"]
REFERENCE_STEPS = 8


def read_bands(profile_path):
    """{precision: (reference seconds, low, high)} for each precision the profile has a band
    for (none for a one-round or older calibration)."""
    fields = {}
    with open(profile_path) as f:
        for line in f:
            key, eq, value = line.partition("=")
            if eq:
                try:
                    fields[key.strip()] = float(value)
                except ValueError:
                    pass
    bands = {}
    for prec, ref in (("fp32", "reference_step_s"), ("bf16", "reference_step_s_bf16")):
        lo, hi = fields.get(f"step_low_{prec}", 0), fields.get(f"step_high_{prec}", 0)
        if fields.get(ref, 0) > 0 and lo > 0 and hi > 0:
            bands[prec] = (fields[ref], lo, hi)
    return bands


def precision_of(name):
    return "bf16" if name.startswith("bf16") else "fp32"


def outside(seconds, band):
    """Whether a re-run reference step left the calibration's band."""
    ref, lo, hi = band
    return not (lo * ref <= seconds <= hi * ref)


def flag_runs(events, bands):
    """events: in the order they ran, ("check", precision, seconds) and ("run", name,
    precision). A run is out of the calibration's regime when the nearest check of its
    precision before it or after it is outside the band. Returns {name: [bool per run]}."""
    checks = [(i, p, outside(s, bands[p])) for i, (kind, p, s) in
              ((i, (e[0], e[1], e[2])) for i, e in enumerate(events)) if kind == "check"]
    flags = {}
    for i, e in enumerate(events):
        if e[0] != "run":
            continue
        _, name, prec = e
        if prec not in bands:
            flags.setdefault(name, []).append(False)
            continue
        before = [o for j, p, o in checks if p == prec and j < i]
        after = [o for j, p, o in checks if p == prec and j > i]
        moved = (before[-1] if before else False) or (after[0] if after else False)
        flags.setdefault(name, []).append(moved)
    return flags


def flagged_layouts(flags):
    """A layout whose median is taken from runs out of regime: more than half of them."""
    return sorted(n for n, f in flags.items() if sum(f) * 2 > len(f))


class DriftMonitor:
    """Runs the reference step every `every` layout runs (and at the start and end); prints
    each check against the band; records the events for flag_runs."""

    def __init__(self, measure_reference, bands, every):
        self.measure_reference, self.bands, self.every = measure_reference, bands, every
        self.events, self.runs = [], 0

    def check(self, when):
        for prec, band in sorted(self.bands.items()):
            seconds = self.measure_reference(prec)
            self.events.append(("check", prec, seconds))
            ref, lo, hi = band
            print(f"  drift check ({when}) {prec} reference step {seconds * 1e3:.1f} ms, "
                  f"calibrated {ref * 1e3:.1f} ms (band {lo * ref * 1e3:.1f} .. "
                  f"{hi * ref * 1e3:.1f})" + ("  MOVED beyond the calibration's spread"
                                              if outside(seconds, band) else ""), flush=True)

    def ran(self, name):
        self.events.append(("run", name, precision_of(name)))
        self.runs += 1
        if self.every and self.runs % self.every == 0:
            self.check(f"after {self.runs} runs")

    def summary(self, errors):
        """errors: {name: |error|}. Prints the flagged layouts and the figures without them;
        returns the flagged names."""
        flagged = flagged_layouts(flag_runs(self.events, self.bands))
        moved = sum(1 for e in self.events if e[0] == "check" and outside(e[2], self.bands[e[1]]))
        checks = sum(1 for e in self.events if e[0] == "check")
        print(f"drift: {moved} of {checks} reference checks outside the calibration's band; "
              f"{len(flagged)} layouts measured mostly after the machine moved"
              + (f": {', '.join(flagged)}" if flagged else ""))
        kept = [e for n, e in errors.items() if n not in flagged]
        if flagged and kept:
            print(f"wall, the layouts measured within the calibration's band only: mean |error| "
                  f"{statistics.mean(kept):.1%}, max {max(kept):.1%} over {len(kept)} layouts")
        return flagged
