"""Part 3 of the overhead benchmark: a finished sweep's wall time against its jobs' own work,
read from its newest Snakemake log, its results and its benchmark TSVs."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

from sweeps import tsv_seconds

from overhead import SWEEP_GOAL

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
_FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)")
_DATE = re.compile(r"^\s*Date: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)$")


def parse_log(path: Path) -> dict:
    """Start, timestamps, and the jobs that finished in one Snakemake log."""
    start, stamps, jobs, finished = None, [], {}, set()
    current = None
    for line in path.read_text(errors="replace").splitlines():
        if m := _DATE.match(line):
            start = start or datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
        elif m := _STAMP.match(line):
            stamps.append(datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"))
            current = None
        elif m := _RULE.match(line):
            current = {"rule": m.group(1)}
        elif current is not None and line.startswith("    ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            current[key] = value
            if key == "jobid":
                jobs[value] = current
        elif m := _FINISHED.match(line):
            finished.add(m.group(1))
            current = None
    return {
        "start": start,
        "stamps": stamps,
        "jobs": [job for jobid, job in jobs.items() if jobid in finished],
    }


def newest_log_with_jobs(folder: Path) -> tuple[Path, dict] | None:
    logs = sorted((folder / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True)
    for path in logs:  # names start with the start time: newest first
        parsed = parse_log(path)
        if parsed["jobs"] and parsed["stamps"]:
            return path, parsed
    return None


def sweep_vs_work(folder: Path, command_s: float | None) -> dict:
    found = newest_log_with_jobs(folder)
    if found is None:
        raise SystemExit(f"{folder}: no Snakemake log with finished jobs in .snakemake/log/")
    log, parsed = found
    stamps = parsed["stamps"]
    start = parsed["start"] or stamps[0]
    wall = (stamps[-1] - start).total_seconds()
    span = (stamps[-1] - stamps[0]).total_seconds()
    print(f"log {log.relative_to(folder)}: {len(parsed['jobs'])} jobs finished")
    print(f"wall time: {wall:.0f} s from the log's start to its last timestamp", end="")
    print(f" ({span:.0f} s from the first job to the last; timestamps are whole seconds)")
    if command_s is not None:
        print(f"wall time of the whole snakemake command, timed from outside: {command_s:.1f} s")
        wall = command_s
    # Measuring jobs (bench, ceiling) report their own work (``wall_s``: from their clock's
    # start, after the imports, to the result); the other jobs' work is their whole process.
    work = {"bench": [0.0, 0.0, 0.0, 0], "ceiling": [0.0, 0.0, 0.0, 0]}  # wall_s, measured, TSV, n
    other_tsv = all_tsv = 0.0
    n_tsv = 0
    by_rule: dict[str, float] = {}
    for job in parsed["jobs"]:
        seconds = tsv_seconds(folder / job["benchmark"]) if "benchmark" in job else None
        if seconds is not None:
            all_tsv += seconds
            n_tsv += 1
            by_rule[job["rule"]] = by_rule.get(job["rule"], 0.0) + seconds
        if job["rule"] not in work:
            other_tsv += seconds or 0.0
            continue
        json_path = folder / next(p for p in job["output"].split(", ") if p.endswith(".json"))
        if not json_path.is_file():
            raise SystemExit(f"{json_path}: a {job['rule']} result the log names is gone")
        result = json.loads(json_path.read_text())
        totals = work[job["rule"]]
        totals[0] += result["wall_s"]
        totals[1] += result["measured_s"] or 0.0
        totals[2] += seconds or 0.0
        totals[3] += 1
    if work["bench"][3] == 0:
        raise SystemExit(f"{log}: no bench job finished in this run")
    for rule, (own, measured, tsv, n) in work.items():
        if n:
            print(
                f"{n} {rule} jobs: sum of wall_s {own:.0f} s (of which measured_s"
                f" {measured:.0f} s); sum of their benchmark TSVs {tsv:.0f} s; per job,"
                f" TSV - wall_s = {(tsv - own) / n:.1f} s (the process's fixed cost)"
            )
    others = ", ".join(f"{rule} {s:.0f} s" for rule, s in by_rule.items() if rule not in work)
    print(f"other jobs' TSVs (their whole process is their work): {others}")
    print(f"all {n_tsv} jobs' benchmark TSVs: {all_tsv:.0f} s")
    own_work = sum(totals[0] for totals in work.values()) + other_tsv
    fixed = sum(totals[2] - totals[0] for totals in work.values())
    processes = sum(totals[3] for totals in work.values())
    ratio = wall / own_work
    print(
        f"the jobs' own work: {own_work:.0f} s; the measuring jobs' process fixed costs:"
        f" {fixed:.0f} s over {processes} processes; the rest of the wall time (Snakemake,"
        f" scheduling, overlap of the light jobs): {wall - own_work - fixed:+.0f} s"
    )
    print(f"wall / the jobs' own work              = {ratio:.2f}   (the goal: <= {SWEEP_GOAL})")
    print(f"wall / sum of bench jobs' wall_s       = {wall / work['bench'][0]:.2f}")
    print(f"wall / sum of all jobs' TSVs (s)       = {wall / all_tsv:.2f}")
    return {"ratio": ratio}
