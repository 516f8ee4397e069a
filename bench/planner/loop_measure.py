"""One prediction and one measurement of a closed-loop layout (closed_loop.py): the
planner's step time for the layout, and one training run's wall and CPU-time estimate."""
import json
import os
import statistics
import subprocess
import time

import loop_layouts as lay


def loadavg():
    return os.getloadavg()[0]


def predict(binary, profile, ranks, k):
    p = subprocess.run([binary, "plan", "--hardware", "local", "--profile", profile, "--ranks",
                        str(ranks), "--json", "--top", "1"] + lay.MODEL + lay.knob_args(k, True),
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    return json.loads(p.stdout)["candidates"][0]["predicted"]["step_time_s"]


def proc_cpu_seconds(pid):
    """CPU seconds (user + system, all threads) the running process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rank_sleeps(pid):
    """(voluntary context switches so far summed over the process's rank threads, their
    count): each is a rank that blocked (a collective's or a receive's waiter that slept,
    comm/local/doorbell.h), and on an otherwise idle core a wake-up to pay."""
    total, threads = 0, 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if not f.read().startswith("mt rank"):
                    continue
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
        except OSError:
            continue
        total += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
        threads += 1
    return total, threads


def busy_cpu_seconds():
    """CPU seconds every core of the machine has spent busy so far (/proc/stat's first line:
    all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def others_share(b0, b1, own0, own1, seconds, cores):
    """The share of the cores that other programs (and this poll) kept busy while a run's
    steps ran: the machine's busy CPU seconds less the run's own, over the cores' seconds.
    Load-independent in the sense the load average is not: it is the CPU taken from this
    run's window, not a minute's mean queue."""
    if seconds <= 0:
        return float("nan")
    return max(0.0, ((b1 - b0) - (own1 - own0)) / (seconds * cores))


def step_lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if '"step_time_s"' in l]
    except (OSError, ValueError):
        return []


def measure(binary, out, ranks, k, steps, skip=2, extra=(), prefix=(), detail=None):
    """One run of `steps` steps. Wall: the median step_time_s the engine records after the
    first `skip` (warm-up: page faults, oneDNN primitive creation). CPU: the process's CPU
    seconds (every rank thread) between the moment step `skip` is written to the metrics
    file and the moment the last step is (both read from /proc while it runs, so start-up
    and teardown are left out), per step, divided by the threads that can run at once
    (min(ranks, cores)): what a step would take on an idle machine with every rank busy.
    On a loaded machine wall time measures the load; the CPU estimate much less so (it
    still grows with cache and memory-bandwidth contention). `prefix` runs the binary under a
    command that execs it (brute_force.py's --realtime: chrt), so the pid read is the run's.
    `detail` (a dict), when given, receives between the same two moments the rank threads'
    sleeps per rank and step ("sleeps", rank_sleeps), rank 0's median tp wait per step
    from the metrics ("tp_wait_s") and the share of the cores other programs took
    ("others", others_share); nan where the poll did not see both moments."""
    metrics = os.path.join(out, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    p = subprocess.Popen(list(prefix) + [binary, "train", "--steps", str(steps), "--quiet", "--metrics",
                          metrics, "--lr-schedule", "constant", "--peak-gflops", "100"] + lay.MODEL +
                         lay.knob_args(k, False) + list(extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    # The poll must cost next to nothing: it shares the cores with the ranks. An earlier
    # version parsed the whole metrics file every 2 ms, which took enough of a core to slow
    # 2-rank runs by 15-20% (dp2 87 ms polled, 71-73 ms alone) and none of the 1-rank runs.
    # Now: a stat every 5 ms, and only the new bytes read and their lines counted.
    c0 = c1 = None
    size, lines = 0, 0
    while p.poll() is None:
        time.sleep(0.005)
        try:
            now = os.stat(metrics).st_size
            if now == size:
                continue
            with open(metrics, "rb") as f:
                f.seek(size)
                chunk = f.read(now - size)
            size += len(chunk)
            lines += chunk.count(b'"step_time_s"')
            if c0 is None and lines >= skip:
                c0 = (proc_cpu_seconds(p.pid), lines, rank_sleeps(p.pid) if detail is not None else None,
                      busy_cpu_seconds(), time.monotonic())
            if c1 is None and lines >= steps:
                c1 = (proc_cpu_seconds(p.pid), lines, rank_sleeps(p.pid) if detail is not None else None,
                      busy_cpu_seconds(), time.monotonic())
        except OSError:
            continue
    err = p.communicate()[1]
    if p.returncode != 0:
        raise SystemExit(err)
    lines_json = step_lines(metrics)
    times = [j["step_time_s"] for j in lines_json]
    wall = statistics.median(times[skip:] if len(times) > skip else times)
    if detail is not None:
        waits = [j.get("tp_comm_wait_s", 0.0) for j in lines_json[skip:]]
        detail["tp_wait_s"] = statistics.median(waits) if waits else float("nan")
        detail["sleeps"] = detail["others"] = float("nan")
        if c0 is not None and c1 is not None and c1[1] > c0[1] and c1[2][1] > 0:
            detail["sleeps"] = (c1[2][0] - c0[2][0]) / (c1[1] - c0[1]) / c1[2][1]
            detail["others"] = others_share(c0[3], c1[3], c0[0], c1[0], c1[4] - c0[4],
                                            os.cpu_count() or 1)
    if c0 is None or c1 is None or c1[1] <= c0[1]:
        return wall, float("nan")
    per_step = (c1[0] - c0[0]) / (c1[1] - c0[1])
    return wall, per_step / min(ranks, os.cpu_count() or 1)

