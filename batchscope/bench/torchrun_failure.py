"""What the workflow makes of a multi-device job whose torchrun failed: the point's ``oom``
result, kept, or the one line that says which rank failed, from its log.

    python -m batchscope.bench.torchrun_failure LOG --devices N --result RESULT

A rank out of memory writes the point's result (``status: oom``, its rank and step) and exits
with :data:`RANK_OOM_EXIT`, so that torchrun stops the ranks waiting for it; torchrun then
fails, but the point has its answer: this says so in one line and exits 0, and the job keeps
its result. Otherwise the job failed (exit 1), and the line names the rank: torchrun's "Root
Cause" report names the rank that failed first; its own ``batchscope bench: rank R of N:
error: ...`` line when it printed one (the other ranks' errors may only echo its loss:
"connection reset by peer"), else ``batchscope bench: rank R of N died: exit code C
(SIGNAL)`` (killed, segfault). The line is appended to the log, so that it is the log's last
line (what the summary reports for a failed point), and printed. Imports no torch.
"""

from __future__ import annotations

import argparse
import re
import sys

from batchscope.core import results

#: The exit code of a rank that ran out of memory and wrote the point's ``oom`` result.
RANK_OOM_EXIT = 3

RANK_ERROR = re.compile(r"^batchscope bench: rank \d+ of \d+: error: .*$", re.MULTILINE)
ROOT_CAUSE = re.compile(
    r"Root Cause.*?^\s*rank\s*:\s*(?P<rank>\d+).*?^\s*exitcode\s*:\s*(?P<code>-?\d+)"
    r"[^\n(]*(?:\([^)]*\)\s*)?(?:\((?P<signal>SIG\w+)\))?",
    re.MULTILINE | re.DOTALL,
)


def failure_line(log: str, devices: int) -> str:
    """The line naming the failed rank and why; a generic line when the log names none."""
    cause = ROOT_CAUSE.search(log)
    own = RANK_ERROR.findall(log)
    if cause is None:
        return own[0] if own else f"batchscope bench: the {devices}-device run failed"
    said = [line for line in own if line.startswith(f"batchscope bench: rank {cause['rank']} ")]
    if said:  # the rank that failed first said why (another's error may only echo its loss)
        return said[0]
    signal = f" ({cause['signal']})" if cause["signal"] else ""
    return (
        f"batchscope bench: rank {cause['rank']} of {devices} died:"
        f" exit code {cause['code']}{signal}"
    )


def oom_line(result_path: str | None) -> str | None:
    """The line of a point whose rank ran out of memory and wrote its ``oom`` result; None when
    there is no such result."""
    if result_path is None:
        return None
    try:
        result = results.read_json(result_path)
    except (OSError, ValueError):
        return None
    if not isinstance(result, dict) or result.get("status") != "oom":
        return None
    return f"batchscope bench: out of memory, the point's result is oom: {result.get('error')}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m batchscope.bench.torchrun_failure")
    p.add_argument("log")
    p.add_argument("--devices", type=int, required=True)
    p.add_argument("--result", help="the point's result, which a rank out of memory writes")
    args = p.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        text = ""
    oom = oom_line(args.result)
    line = oom or failure_line(text, args.devices)
    with open(args.log, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    print(line, file=sys.stderr)
    return 0 if oom else 1


if __name__ == "__main__":
    sys.exit(main())
