"""``python -m batchscope.bench.warm SOCKET``: a warm interpreter that forks bench jobs.

Started by the first job that needs it (``batchscope.bench.launch``, which holds the protocol's
client side), with that job's interpreter, folder and environment. It imports torch, torchvision
and the bench modules once, takes a lock so that one runs per key, and then, for each job a
client sends over ``SOCKET`` (a Unix socket, one message each way: the request with the
client's stdin, stdout and stderr, then the child's pid, then its exit status), forks a child
that becomes the job:

- its own session (a signal to the job reaches its DataLoader workers), dying with this process;
- the client's folder, environment, search path, umask and resource limits, and its streams;
- its pages made what a fresh job's are after the same imports (:func:`resident_pages`): the
  library pages left resident here mapped again (``MADV_POPULATE_READ``; a fork maps file pages
  lazily, so a child's resident set would leave out the ~270 MB of torch a fresh job holds from
  its import, and its ``peak_mem_mb`` would read lower), and the ~380 MB of private pages it
  shares with this process copied now (``MADV_POPULATE_WRITE``), not by a fault at the first
  write to each during the measured steps (forked training at batch 32 measured 13% slower
  than fresh without it, 2% with it: scripts/warm_start.py);
- then ``python -m MODULE`` as the interpreter would run it.

A client that goes away (``kill -9``) takes its child with it (SIGKILL to its session). Never
touching a device or starting a thread pool before forking is what keeps the children sound:
this process imports, and does nothing else with torch. It ends after ``--idle-s`` seconds
without a job, removing its socket.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import time
from pathlib import Path

from batchscope.bench.launch import IDLE_S, LAUNCH_ENV, signal_job

#: What a child imports anyway, imported once here (a missing optional one is skipped).
PRELOAD = (
    "torch",
    "torchvision",
    "psutil",
    "batchscope.bench.job",
    "batchscope.bench.envinfo",
    "batchscope.bench.measure",
    "batchscope.bench.model_check",
    "batchscope.bench.models",
    "batchscope.bench.runner",
    "batchscope.bench.seeding",
    "batchscope.bench.load",
    "batchscope.bench.data",
    "batchscope.bench.jobtime",
)
MADV_POPULATE_READ = 22  # Linux >= 5.14
MADV_POPULATE_WRITE = 23
MAPS = "/proc/self/maps"
PR_SET_PDEATHSIG = 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m batchscope.bench.warm", description=__doc__.split("\n")[0]
    )
    p.add_argument("socket", type=Path, help="the Unix socket to listen on")
    p.add_argument("--idle-s", type=float, default=IDLE_S, help="end after this long idle")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lock = open(args.socket.with_suffix(".lock"), "w")  # noqa: SIM115 - held for life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another one serves this key
    args.socket.unlink(missing_ok=True)  # a socket left by one that was killed
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(args.socket))
    listener.listen(64)
    preload()
    os.chdir("/")  # the folder it started in may go; each child goes to its own
    server = Server(listener, lock, resident_pages(), args.idle_s)
    server.refusal = cuda_touched()
    server.serve()
    args.socket.unlink(missing_ok=True)  # the key's files go with it (the log if empty)
    args.socket.with_suffix(".lock").unlink(missing_ok=True)
    log = args.socket.with_suffix(".log")
    if log.exists() and log.stat().st_size == 0:
        log.unlink()
    return 0


def preload() -> None:
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    sys.stdout.flush()
    sys.stderr.flush()


def cuda_touched() -> str | None:
    """Why children of this process could not use a GPU, or None: a process that has called
    into the CUDA driver (which loads ``libcuda``) before forking leaves its children a driver
    they cannot initialise. The imports here must not; if one did, every job starts fresh."""
    try:
        with open(MAPS) as maps:
            if any("libcuda.so" in line for line in maps):
                return "importing torch here loaded the CUDA driver, which a fork cannot share"
    except OSError:
        pass
    return None


def resident_pages() -> dict[int, list[tuple[int, int]]]:
    """The (start, length) ranges of this process's resident pages that a fork leaves
    different, by the advice that makes a child's like them: file pages it would fault in
    lazily (``MADV_POPULATE_READ``), and private writable pages it would share until its first
    write to each (``MADV_POPULATE_WRITE``: the copy made up front, not in the measured steps)."""
    page = os.sysconf("SC_PAGE_SIZE")
    ranges: dict[int, list[tuple[int, int]]] = {MADV_POPULATE_READ: [], MADV_POPULATE_WRITE: []}
    try:
        with open(MAPS) as maps, open("/proc/self/pagemap", "rb") as pagemap:
            for line in maps:
                fields = line.split()
                perms, path = fields[1], fields[5] if len(fields) > 5 else ""
                if perms.startswith("rw") and perms[3] == "p":
                    advice = MADV_POPULATE_WRITE
                elif path.startswith("/") and perms.startswith("r"):
                    advice = MADV_POPULATE_READ
                else:
                    continue
                start, end = (int(x, 16) for x in fields[0].split("-"))
                pagemap.seek(start // page * 8)
                entries = memoryview(pagemap.read((end - start) // page * 8)).cast("Q")
                run = None
                for i, entry in enumerate([*entries, 0]):
                    if entry >> 63 and run is None:
                        run = i
                    elif not entry >> 63 and run is not None:
                        ranges[advice].append((start + run * page, (i - run) * page))
                        run = None
    except OSError:
        return {}
    return ranges


class Server:
    def __init__(self, listener: socket.socket, lock, resident: dict, idle_s: float):
        self.listener, self.lock = listener, lock
        self.resident, self.idle_s = resident, idle_s
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, self.accept)
        self.children: dict[int, tuple[socket.socket, int]] = {}  # pid: (client, pidfd)
        self.last = time.monotonic()
        self.refusal: str | None = None  # why no job may be forked here

    def serve(self) -> None:
        while True:
            events = self.selector.select(timeout=1.0)
            for selected, _ in events:
                selected.data(selected.fileobj)
            if events or self.children:
                self.last = time.monotonic()
            elif time.monotonic() - self.last > self.idle_s:
                self.selector.unregister(self.listener)
                self.listener.close()
                return

    def accept(self, listener: socket.socket) -> None:
        client, _ = listener.accept()
        fds: list[int] = []
        try:
            client.settimeout(10.0)
            data, fds, _, _ = socket.recv_fds(client, 1 << 20, 3)
            job = json.loads(data)
            if len(fds) != 3:
                raise ValueError("no streams")
        except (OSError, ValueError):
            for fd in fds:
                os.close(fd)
            client.close()
            return
        if self.refusal:
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                client.sendall(json.dumps({"refused": self.refusal}).encode())
            client.close()
            return
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = self.child(job, fds)
            finally:
                _exit(code)
        for fd in fds:
            os.close(fd)
        try:
            client.sendall(json.dumps({"pid": pid}).encode())
        except OSError:
            signal_job(pid, signal.SIGKILL)
        pidfd = os.pidfd_open(pid)
        self.children[pid] = (client, pidfd)
        client.setblocking(False)
        self.selector.register(client, selectors.EVENT_READ, lambda _: self.gone(pid))
        self.selector.register(pidfd, selectors.EVENT_READ, lambda _: self.ended(pid))

    def gone(self, pid: int) -> None:
        """The client closed its end (killed): the job goes too; :meth:`ended` reaps it."""
        client, _ = self.children[pid]
        try:
            if client.recv(1):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        self.selector.unregister(client)
        signal_job(pid, signal.SIGKILL)

    def ended(self, pid: int) -> None:
        client, pidfd = self.children.pop(pid)
        _, status = os.waitpid(pid, 0)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        with contextlib.suppress(KeyError):
            self.selector.unregister(client)
        try:
            client.setblocking(True)
            client.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:
            pass
        client.close()

    def child(self, job: dict, fds: list[int]) -> int:
        """Become the job (in the forked child); its exit status."""
        os.setsid()
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        self.selector.close()
        self.listener.close()
        self.lock.close()  # a child that outlives this process must not keep its key
        for client, pidfd in self.children.values():
            client.close()
            os.close(pidfd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(job["cwd"])
        os.umask(job["umask"])
        import resource

        for name, (soft, hard) in job["limits"].items():
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(getattr(resource, name), (soft, hard))
        os.environ.clear()
        os.environ.update(job["env"])
        os.environ[LAUNCH_ENV] = f"forked:{os.getpid()}"
        first = [job["cwd"] if entry == "." else entry for entry in job["path"][:1]]
        sys.path[:] = [*first, *job["path"][1:]]
        populate(self.resident)
        sys.argv = ["", *job["argv"]]  # runpy puts the module's file first
        try:
            runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        except SystemExit as done:
            code = done.code
            if code is None:
                return 0
            if isinstance(code, int):
                return code
            print(code, file=sys.stderr)
            return 1
        except BaseException:  # noqa: BLE001 - as the interpreter would: traceback, status 1
            import traceback

            traceback.print_exc()
            return 1
        return 0


def populate(resident: dict[int, list[tuple[int, int]]]) -> None:
    """Make this (forked) process's pages what they were in its parent: resident, and its own."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for advice, ranges in resident.items():
        for start, length in ranges:
            failed = libc.madvise(start, length, advice) != 0
            if failed and ctypes.get_errno() == 22:  # EINVAL: a kernel before 5.14 has none
                break


def _exit(code: int) -> None:
    """End the child without the interpreter's teardown (as ``exit_without_teardown``), its
    DataLoader workers stopped first if any are left."""
    import multiprocessing

    if multiprocessing.active_children():
        multiprocessing.util._exit_function()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    # Without the interpreter's teardown, as its children end: with torch loaded it costs
    # about 1.5 CPU-seconds here, and since each round has its own interpreter, one ending
    # on its idle timeout does so during the next round's measured steps (a sweep of 7
    # December 2026 flagged 6-8 runs as measured beside other work, against 1-2 before).
    _exit(main())
