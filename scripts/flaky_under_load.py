"""Run the tests N times with every core kept busy, and name the tests that failed in
some runs but not in all: the timing-dependent ones a loaded CI runner fails at random.

A shared CI runner gives pytest less CPU than a quiet laptop: a test that waits for a
thread, a poller or a wall-clock bound passes idle and fails there. This starts one busy
process pinned to each core (`--load`, default: all of them), runs pytest `--runs` times
(its arguments after `--`; none: the default suite, soak tier excluded, as CI runs it),
stops the load, and prints per test how many runs it failed. The tests import this
checkout's package (PYTHONPATH), their subprocesses too. Exit status 1 when a test
failed in some run (flaky or broken), 0 otherwise. Run on a machine you have to yourself:
the load takes every core. The operating guide's "Testing" section says when.

    python scripts/flaky_under_load.py --runs 3                                  # the default suite
    python scripts/flaky_under_load.py --runs 20 -- tests/study/test_trial_run.py
    python scripts/flaky_under_load.py --runs 5 --load 0 -- tests/study           # idle, to compare
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
BUSY = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); exec('while True: pass')"


def start_load(processes: int) -> list[subprocess.Popen]:
    """One busy loop per process, pinned to the cores in turn."""
    cores = sorted(os.sched_getaffinity(0))
    return [subprocess.Popen([sys.executable, "-c", BUSY, str(cores[i % len(cores)])]) for i in range(processes)]


def stop_load(load: list[subprocess.Popen]) -> None:
    for proc in load:
        proc.kill()
    for proc in load:
        proc.wait()


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> "passed" | "failed" | "skipped" from one run's JUnit XML."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            out[test] = "failed"
        elif case.find("skipped") is not None:
            out[test] = "skipped"
        else:
            out[test] = "passed"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="how many times to run pytest (default 3)")
    parser.add_argument(
        "--load",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="busy processes beside pytest, pinned one per core (default: one per core; 0: idle)",
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for each run's log and JUnit XML")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: the default suite)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.load < 0:
        parser.error("--runs must be at least 1 and --load at least 0")
    out = args.out or Path(tempfile.mkdtemp(prefix="flaky_under_load."))
    out.mkdir(parents=True, exist_ok=True)

    # this checkout's package, in pytest and in every process a test starts (`python -m
    # cem_ablate...`), whatever checkout is installed
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")])))
    runs: list[dict[str, str]] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the load stops too (finally)
    load = start_load(args.load)
    try:
        for i in range(1, args.runs + 1):
            junit, log = out / f"run{i}.xml", out / f"run{i}.log"
            start = time.monotonic()
            with log.open("w") as stream:
                command = [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"--junitxml={junit}",
                    *args.pytest_args,
                ]
                rc = subprocess.call(command, stdout=stream, stderr=subprocess.STDOUT, env=env)
            seen = outcomes(junit) if junit.exists() else {}
            failed = sum(v == "failed" for v in seen.values())
            print(
                f"run {i}/{args.runs}: exit {rc}, {len(seen)} tests, {failed} failed, "
                f"{time.monotonic() - start:.0f} s (log {log})",
                flush=True,
            )
            if not seen:
                print(f"error: run {i} collected no tests; see {log}", file=sys.stderr)
                return 2
            runs.append(seen)
    finally:
        stop_load(load)

    failures = Counter(test for run in runs for test, result in run.items() if result == "failed")
    ran = Counter(test for run in runs for test, result in run.items() if result != "skipped")
    flaky = sorted(t for t in failures if failures[t] < ran[t])
    broken = sorted(t for t in failures if failures[t] == ran[t])
    print(f"\n{args.runs} runs with {args.load} busy processes beside pytest; pytest {' '.join(args.pytest_args)}")
    for title, tests in (
        ("failed in some runs, passed in others (flaky)", flaky),
        ("failed in every run it ran", broken),
    ):
        print(f"{title}: {len(tests) or 'none'}")
        for test in tests:
            print(f"  {failures[test]}/{ran[test]}  {test}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
