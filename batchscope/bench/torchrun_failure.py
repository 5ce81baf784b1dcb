"""The one line that says which rank of a failed multi-device job failed, from its log.

    python -m batchscope.bench.torchrun_failure LOG --devices N

torchrun's "Root Cause" report names the rank that failed first; its own
``batchscope bench: rank R of N: error: ...`` line when it printed one (the other ranks' errors
may only echo its loss: "connection reset by peer"), else ``batchscope bench: rank R of N died:
exit code C (SIGNAL)`` (killed, segfault). The workflow appends the
line to the job's log, so that it is the log's last line (what the summary reports for a failed
point). Imports no torch.
"""

from __future__ import annotations

import argparse
import re
import sys

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m batchscope.bench.torchrun_failure")
    p.add_argument("log")
    p.add_argument("--devices", type=int, required=True)
    args = p.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        text = ""
    print(failure_line(text, args.devices))
    return 0


if __name__ == "__main__":
    sys.exit(main())
