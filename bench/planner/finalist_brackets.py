"""The brute force's finalists measured in brackets (brute_force.py): the planner's first
choice against each finalist as a ratio taken inside one bracket, and a stated rule for when
that ratio has settled the 5% goal.

Why brackets. Stop 47's round-robin window put the first choice +6.3% from the best
finalist with rounds -0.2% .. +24.6%: its rule took each layout's median over rounds on its
own and divided the two medians, so each median could come from a different round, and a
host that swings ~20% between runs and drifts within minutes entered the gap. Here:
- a bracket runs every finalist once in an order and once in the reverse order (A B C ..
  C B A), the order rotated from bracket to bracket. Each layout's two runs of a bracket
  sit symmetrically about the bracket's middle, so their mean cancels a drift of the host
  that is linear over the bracket (about half a minute), for every layout alike;
- per bracket, the first choice's mean over each finalist's mean (the same bracket, the
  same host) is one ratio; the figure is the median of the brackets' ratios, and the best
  finalist the one with the highest median ratio (the goal's definition is unchanged: the
  first choice against the measured best; only how the measured side is taken changed);
- the rule (bracket_verdict): the middle of the best finalist's bracket ratios (a quarter
  of them left out at each end, loop_rounds.middle_spread's cut) decides. `within` when
  even its highest is at most 1 + goal, `beyond` when even its lowest is above, else
  `unsettled`: one more bracket is run, up to MAX_BRACKETS, and a verdict still
  `unsettled` then is reported as such with its median (never as a result).
"""
import statistics

# Brackets run before the rule is first applied: 4 give a middle of 2 ratios (one left out
# at each end), so one bracket struck by another program's burst cannot decide alone.
BRACKETS = 4
# The bound: at most 8 brackets (16 runs of each finalist). With 6 layouts of ~2.6 s a run
# (20 steps of ~80 ms and the start-up) a bracket takes ~30 s: 2-4 min in all.
MAX_BRACKETS = 8


def bracket_order(ids, k):
    """Bracket k's runs: the ids rotated by k, then the same in reverse."""
    n = len(ids)
    fwd = ids[k % n:] + ids[:k % n]
    return fwd + fwd[::-1]


def middle_range(values):
    """(lowest, highest) of the middle values: a quarter (at least one when there are more
    than two) left out at each end, as loop_rounds.middle_spread cuts."""
    v = sorted(values)
    if len(v) <= 2:
        return v[0], v[-1]
    cut = max(1, len(v) // 4)
    return v[cut], v[-cut - 1]


def bracket_ratios(brackets, first):
    """brackets: [{id: [wall, wall]}] (each layout's two runs of a bracket). Returns {id:
    [first's mean / id's mean per bracket]} for every id but `first`: above 1, the first
    choice was the slower of the pair in that bracket."""
    out = {}
    for b in brackets:
        ref = statistics.mean(b[first])
        for i, w in b.items():
            if i != first:
                out.setdefault(i, []).append(ref / statistics.mean(w))
    return out


def bracket_verdict(ratios, goal=0.05):
    """ratios: bracket_ratios' result. Returns (best id, gap, lo, hi, verdict): the best
    finalist (highest median ratio), the first choice's gap over it (median ratio - 1; 0
    where every finalist's median is below 1: the first choice measured fastest), the middle
    range of its bracket ratios less 1, and 'within' / 'beyond' / 'unsettled'."""
    best = max(ratios, key=lambda i: statistics.median(ratios[i]))
    med = statistics.median(ratios[best]) - 1
    lo, hi = (x - 1 for x in middle_range(ratios[best]))
    if hi <= goal:
        verdict = "within"
    elif lo > goal:
        verdict = "beyond"
    else:
        verdict = "unsettled"
    return best, max(0.0, med), lo, hi, verdict


def settle(measure_one, ids, first, brackets=BRACKETS, max_brackets=MAX_BRACKETS, goal=0.05,
           log=print):
    """Runs `brackets` brackets of `ids` (measure_one(id) -> wall seconds), then one more
    while the verdict is 'unsettled', up to `max_brackets`. Returns (the brackets: [{id:
    [wall, wall]}], bracket_verdict's tuple)."""
    done = []
    while True:
        b = {i: [] for i in ids}
        for i in bracket_order(ids, len(done)):
            b[i].append(measure_one(i))
        done.append(b)
        if len(done) < brackets:
            continue
        verdict = bracket_verdict(bracket_ratios(done, first), goal)
        if verdict[4] != "unsettled" or len(done) >= max_brackets:
            return done, verdict
        log(f"bracket {len(done)}: first choice {verdict[1]:+.1%}, middle brackets "
            f"{verdict[2]:+.1%} .. {verdict[3]:+.1%} straddle the goal: one more bracket "
            f"(at most {max_brackets})")
