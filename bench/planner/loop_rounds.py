"""The closed loop's interleaved rounds (closed_loop.py): every layout measured round by
round, and the layouts whose rounds spread too far measured again."""
import statistics

from loop_measure import measure


# A layout whose rounds spread by more than this (max / min - 1) is measured again. 20% is
# the goal's max error: rounds that disagree by more than the error to be judged cannot
# judge it (a layout's three rounds spread by a median of 10-19% on this machine in the
# afternoon, single layouts by up to 95% when another process took a core for a while).
SPREAD_LIMIT = 0.20


def spread(values):
    return max(values) / min(values) - 1


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


def remeasure_spread(binary, out, chosen, rounds, steps, walls, cpus, limit, drift=None):
    """The stated rule: every layout whose rounds spread by more than `limit` is measured
    `rounds` more times (interleaved among those layouts), and its figure becomes the median
    of all its rounds. None is dropped: a layout still spread after that stays in the error
    figures and is listed as such. Returns {name: (first rounds, added rounds)}."""
    flagged = [c for c in chosen if len(walls[c[0]]) > 1 and spread(walls[c[0]]) > limit]
    if not flagged:
        return {}
    first = {name: list(walls[name]) for name, _, _ in flagged}
    print(f"re-measuring {len(flagged)} layouts whose rounds spread by more than {limit:.0%}",
          flush=True)
    run_rounds(binary, out, flagged, rounds, steps, walls, cpus, "re-measure", drift)
    done = {}
    for name, _, _ in flagged:
        added = walls[name][len(first[name]):]
        done[name] = (first[name], added)
        still = spread(sorted(walls[name])[1:-1]) if len(walls[name]) > 2 else spread(walls[name])
        print(f"re-measured {name:26} rounds {' '.join(f'{w * 1e3:.1f}' for w in first[name])}"
              f" | {' '.join(f'{w * 1e3:.1f}' for w in added)}  median "
              f"{statistics.median(first[name]) * 1e3:.1f} -> "
              f"{statistics.median(walls[name]) * 1e3:.1f} ms; spread without the extremes "
              f"{still:.0%}" + ("  STILL SPREAD" if still > limit else ""), flush=True)
    return done

