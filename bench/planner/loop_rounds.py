"""The closed loop's interleaved rounds (closed_loop.py): every layout measured round by
round, and the layouts whose rounds spread too far measured again."""
import statistics

from loop_measure import measure


# A layout whose rounds spread by more than this (max / min - 1) is measured again. 20% is
# the goal's max error: rounds that disagree by more than the error to be judged cannot
# judge it (a layout's three rounds spread by a median of 10-19% on this machine in the
# afternoon, single layouts by up to 95% when another process took a core for a while).
SPREAD_LIMIT = 0.20

# How many times a layout is re-measured (each time `rounds` more rounds) while its middle
# rounds still spread past the limit. One pass left stop 46's `llama tp4 sp m8` at rounds
# 190 128 97 | 98 120 750 ms (98 to 190 without the extremes); a slow minute of the host
# lands on a few rounds, so more rounds let the median pass it by. Past the last pass the
# layout is reported as unmeasurable in that window (loop_report.py): kept in every error
# figure, listed with its rounds, never dropped and never rescaled.
REMEASURE_PASSES = 3


def spread(values):
    return max(values) / min(values) - 1


def middle_spread(values):
    """The spread of the middle rounds: a quarter of them (at least one when there are more
    than two) left out at each end. For 6 rounds this is the spread without the extremes
    that stop 30's rule printed; with more rounds it leaves out as many slow minutes as the
    rounds can outvote."""
    v = sorted(values)
    if len(v) <= 2:
        return spread(v)
    cut = max(1, len(v) // 4)
    return spread(v[cut:-cut])


def run_rounds(binary, out, chosen, rounds, steps, walls, cpus, label="round", drift=None):
    """Round r of every layout before round r + 1: a slow minute of the host (another
    process taking a core) lands on one round of many layouts, which their medians discard,
    instead of on every round of the few layouts measured in it."""
    for rnd in range(rounds):
        for name, ranks, k in chosen:
            wall, cpu = measure(binary, out, ranks, k, steps)
            walls[name].append(wall)
            cpus[name].append(cpu)
            if drift:
                drift.ran(name)
            print(f"  {label} {rnd + 1}/{rounds} {name:26} wall {wall * 1e3:8.1f} ms", flush=True)


def remeasure_spread(binary, out, chosen, rounds, steps, walls, cpus, limit, drift=None,
                     passes=REMEASURE_PASSES):
    """The stated rule: every layout whose rounds spread by more than `limit` is measured
    `rounds` more times (interleaved among those layouts), and again, up to `passes` times
    in all, while the middle of its rounds (middle_spread) still spreads past `limit`; its
    figure is the median of all its rounds. None is dropped. Returns ({name: (first rounds,
    added rounds)}, [names still spread after the last pass: unmeasurable in this window])."""
    flagged = [c for c in chosen if len(walls[c[0]]) > 1 and spread(walls[c[0]]) > limit]
    if not flagged:
        return {}, []
    first = {name: list(walls[name]) for name, _, _ in flagged}
    for done_passes in range(passes):
        print(f"re-measuring {len(flagged)} layouts whose rounds spread by more than {limit:.0%}"
              f" (pass {done_passes + 1} of at most {passes})", flush=True)
        run_rounds(binary, out, flagged, rounds, steps, walls, cpus, "re-measure", drift)
        flagged = [c for c in flagged if middle_spread(walls[c[0]]) > limit]
        if not flagged:
            break
    unmeasurable = [name for name, _, _ in flagged]
    done = {}
    for name, added in ((n, walls[n][len(f):]) for n, f in first.items()):
        done[name] = (first[name], added)
        still = middle_spread(walls[name])
        print(f"re-measured {name:26} rounds {' '.join(f'{w * 1e3:.1f}' for w in first[name])}"
              f" | {' '.join(f'{w * 1e3:.1f}' for w in added)}  median "
              f"{statistics.median(first[name]) * 1e3:.1f} -> "
              f"{statistics.median(walls[name]) * 1e3:.1f} ms; middle rounds' spread "
              f"{still:.0%}" + ("  STILL SPREAD: unmeasurable in this window"
                                if name in unmeasurable else ""), flush=True)
    return done, unmeasurable
