"""Where `make grade` runs a student's code: the worker (tools/grade_worker.py) in a bubblewrap
sandbox, under limits, supervised until it ends.

The sandbox (Linux, bubblewrap): the system, the Python environment and the book's package
read-only, one private writable scratch folder, nothing else of the file system (no home, no class
folder, no runs/); a user who is not root and holds no capabilities; its own network (nothing
reachable, the host's loopback included), process and IPC namespaces; an environment of a few
fixed variables; limits on memory, processes, CPU time, file size and what it may send back; every
process it started ends with it. `sandbox_command` builds it from named parts, one for each of
those; `sandbox_problem` says why none can run here; `run_worker` runs the worker in it (or,
where the teacher chose --no-sandbox, without it) and collects what the worker sent.
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import annotated
from tools.wire import DONE

TOOLS = Path(__file__).resolve().parent
BOOK = Path(annotated.__file__).resolve().parent  # the book the grader imports and judges with
TIMEOUT_S = 120  # a notebook: its cells and all its calls
CALL_TIMEOUT_S = 10  # one call of a student's function on one input
MEMORY_BYTES = 4 * 2**30  # address space (torch alone reserves about 0.7 GiB)
PROCESSES = 64  # processes and threads the sandbox may start
FILE_BYTES = 64 * 2**20  # the largest file it may write in its scratch folder
SENT_BYTES = 64 * 2**20  # what it may send back
NOBODY = 65534  # the user a root-run grader drops the students' code to
GRADER = Path("/grader")  # where the worker's own files are, inside the sandbox
WORKER_FILES = ("__init__.py", "wire.py", "grade_worker.py")  # of tools/: what the worker imports
SYSTEM_TOPS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # beside /usr, bound or linked


@dataclass(frozen=True)
class Limits:
    timeout: float = TIMEOUT_S
    call_timeout: float = CALL_TIMEOUT_S
    memory: int = MEMORY_BYTES
    sandbox: bool = True


# --- the command --------------------------------------------------------------------------------


def worker_arguments(root: Path, channel: int) -> list[str]:
    """Python's arguments that start the worker from `root`, the folder that holds tools/ (-I
    puts no folder of the command's on the path), writing its records on `channel`."""
    start = f"import sys; sys.path.insert(0, {str(root)!r}); from tools.grade_worker import main"
    return ["-c", f"{start}; main()", str(channel)]


def sandbox_command(scratch: Path, arguments: list[str]) -> list[str]:
    """bubblewrap around `python -I -u ARGUMENTS`, the environment's Python: the parts below, in
    the order bubblewrap applies them."""
    return [
        "bwrap",
        *isolation(),
        *environment_variables(),
        *system_folders(),
        *python_folders(),
        *grader_files(),
        *scratch_folder(scratch),
        *user_namespace(),
        "--",
        *dropped_privileges(),
        environment_python(),
        "-I",
        "-u",
        *arguments,
    ]


def isolation() -> list[str]:
    """Its own process, network (nothing reachable), IPC, host name and cgroup namespaces and
    session, no variable of the grader's, and everything in it killed when the grader ends."""
    return [
        *("--die-with-parent", "--new-session", "--as-pid-1", "--unshare-pid", "--unshare-net"),
        *("--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--clearenv"),
    ]


def environment_variables() -> list[str]:
    command = []
    for name, value in worker_environment("/scratch").items():
        command += ["--setenv", name, value]
    return command


def system_folders() -> list[str]:
    """/usr read-only, a /proc and /dev of its own, and /bin, /lib and the like as this system
    has them (links where it merged them into /usr)."""
    command = ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev"]
    for top in SYSTEM_TOPS:
        path = Path("/", top)
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            command += ["--ro-bind", str(path), str(path)]
    return command


def python_folders() -> list[str]:
    """`readable_roots()` read-only, by their real paths, and the folders above them made."""
    command, made = [], set()
    for root in readable_roots():
        for parent in reversed(root.parents[:-1]):  # folders the sandbox must be able to enter
            if parent not in made:
                made.add(parent)
                command += ["--perms", "0755", "--dir", str(parent)]
        command += ["--ro-bind", str(root), str(root)]
    return command


def grader_files() -> list[str]:
    """The worker and the modules it imports, read-only in GRADER/tools, and the grader's own
    book in GRADER/annotated (nothing else of the checkout). The worker puts GRADER first on its
    path, so it imports the very book the grader judges with: the environment's own install may
    point elsewhere (an editable install of another checkout, whose folder the sandbox does not
    show, where `.venv` is a link to that checkout's environment)."""
    command = [
        "--perms",
        "0755",
        "--dir",
        str(GRADER),
        "--perms",
        "0755",
        "--dir",
        f"{GRADER}/tools",
    ]
    for name in WORKER_FILES:
        command += ["--ro-bind", str(TOOLS / name), f"{GRADER}/tools/{name}"]
    command += ["--ro-bind", str(BOOK), f"{GRADER}/annotated"]
    return command


def scratch_folder(scratch: Path) -> list[str]:
    return ["--bind", str(scratch), "/scratch", "--chdir", "/scratch"]


def user_namespace() -> list[str]:
    """Not root: a user namespace of its own, every capability dropped. Root: none (it runs as
    nobody instead, `dropped_privileges`)."""
    return [] if os.geteuid() == 0 else ["--unshare-user", "--cap-drop", "ALL"]


def dropped_privileges() -> list[str]:
    """Root: setpriv runs the code as nobody, without capabilities or groups. Not root: nothing."""
    if os.geteuid() != 0:
        return []
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return drop + ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def worker_environment(scratch: str) -> dict[str, str]:
    """The few variables the students' process gets: none of the grader's own."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": scratch,
        "TMPDIR": scratch,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": scratch,
    }


def readable_roots() -> list[Path]:
    """What the sandbox shows read-only besides the system: the Python environment (its prefixes
    and every site-packages on sys.path) and the book's package. Never the checkout's root, the
    home folder or a class folder."""
    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)}
    roots.add(Path(os.path.realpath(sys.executable)).parent.parent)
    roots.update(
        Path(entry) for entry in sys.path if entry.endswith(("site-packages", "dist-packages"))
    )
    roots.add(BOOK)
    system = [Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")]
    kept = sorted(
        root.resolve()
        for root in roots
        if root.is_dir() and not any(root.resolve().is_relative_to(s) for s in system)
    )
    return [root for root in kept if not any(root != o and root.is_relative_to(o) for o in kept)]


def environment_python() -> str:
    """This Python by its environment's real folder. The sandbox binds `readable_roots()`
    resolved, so a path through a link (`.venv` a link to another folder) does not exist inside
    it; the file's own link (bin/python) is kept, for Python to find its environment beside it."""
    executable = Path(sys.executable)
    return str(executable.parent.resolve() / executable.name)


def sandbox_problem() -> str | None:
    """Why no sandbox can run here, with what to do; None when it can."""
    if platform.system() != "Linux":
        return (
            f"grade: no sandbox on {platform.system()} (bubblewrap needs Linux): grade on a Linux "
            "machine, or pass --no-sandbox to run the students' code with your rights"
        )
    missing = [tool for tool in ("bwrap", "setpriv") if shutil.which(tool) is None]
    if os.geteuid() != 0 and "setpriv" in missing:
        missing.remove("setpriv")
    if missing:
        return (
            f"grade: {' and '.join(missing)} not found: install Debian's bubblewrap "
            "(`sudo apt-get install bubblewrap`; make grade does it when run as root), or pass "
            "--no-sandbox to run the students' code with your rights"
        )
    with tempfile.TemporaryDirectory() as scratch:
        if os.geteuid() == 0:
            os.chown(scratch, NOBODY, NOBODY)
        probe = sandbox_command(Path(scratch), ["-c", "pass"])  # the worker's sandbox, no worker
        done = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return (
            f"grade: bubblewrap cannot make its sandbox here ({reason}): this kernel or container "
            "may forbid user namespaces; grade on a machine that allows them, or pass "
            "--no-sandbox to run the students' code with your rights"
        )
    return None


def book_problem(limits: Limits) -> str | None:
    """What stops the book's own code from loading where the students' code runs (the sandbox,
    or this machine under --no-sandbox): the last line of the error, or None when it loads."""
    start = f"import sys; sys.path.insert(0, {str(GRADER if limits.sandbox else TOOLS.parent)!r})"
    load = "import torch, annotated.exercises"
    with tempfile.TemporaryDirectory() as scratch:
        if limits.sandbox and os.geteuid() == 0:
            os.chown(scratch, NOBODY, NOBODY)
        arguments = ["-c", f"{start}; {load}"]
        if limits.sandbox:
            command = sandbox_command(Path(scratch), arguments)
        else:
            command = [environment_python(), "-I", *arguments]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=scratch)
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]


# --- the supervision ----------------------------------------------------------------------------


def run_worker(job: bytes, limits: Limits) -> tuple[bytes, bool]:
    """Runs the worker on the job (sandboxed unless limits.sandbox is False): what it sent back,
    and whether it ran past limits.timeout."""
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        if os.geteuid() == 0 and limits.sandbox:
            os.chown(scratch, NOBODY, NOBODY)
        read_end, write_end = os.pipe()
        command = (
            sandbox_command(Path(scratch), worker_arguments(GRADER, write_end))
            if limits.sandbox
            else [sys.executable, "-I", "-u", *worker_arguments(TOOLS.parent, write_end)]
        )
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=scratch,
            env=worker_environment(scratch),
            pass_fds=(write_end,),
            start_new_session=True,
            preexec_fn=_limiter(limits),
        )
        os.close(write_end)
        received, timed_out = b"", True
        try:
            received, timed_out = _collect(process, job, read_end, limits.timeout)
        finally:
            _end(process, grace=0 if timed_out else 5)
        return received, timed_out


def _collect(process, job: bytes, read_end: int, timeout: float) -> tuple[bytes, bool]:
    """Sends the job, then reads the worker's lines until it ends, its time is up, it has sent
    its last line (the wire's DONE) or SENT_BYTES; never waits longer than `timeout` in all."""
    deadline = time.monotonic() + timeout
    try:
        process.stdin.write(job)
        process.stdin.close()
    except OSError:  # it ended before reading its job
        pass
    received, timed_out = bytearray(), False
    os.set_blocking(read_end, False)
    with os.fdopen(read_end, "rb", buffering=0) as channel:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready = _wait_readable(channel, min(left, 0.5))
            chunk = channel.read(1 << 16) if ready else None
            if chunk == b"":  # every writer has closed it: the worker ended
                break
            if chunk:
                received += chunk
                if len(received) > SENT_BYTES or received.endswith(DONE):
                    break
    return bytes(received), timed_out


def _wait_readable(channel, seconds: float) -> bool:
    return bool(select.select([channel], [], [], seconds)[0])


def _end(process: subprocess.Popen, grace: float) -> None:
    """The worker's whole session gone: `grace` seconds to end by itself (it exits right after
    its last line, and so its CPU time is counted as the grader's children's), then killed (the
    sandbox's namespace takes everything it started with it)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _limiter(limits: Limits):
    """What runs in the child before the worker (or the sandbox) starts: the limits."""
    processes = _tasks_of(NOBODY if os.geteuid() == 0 and limits.sandbox else os.getuid())
    cpu = int(limits.timeout) + 5

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (processes + PROCESSES,) * 2)

    return limit


def _tasks_of(uid: int) -> int:
    """How many processes and threads `uid` runs now (RLIMIT_NPROC counts them all)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            count += int(fields.get("Threads", "1").strip() or 1)
    return count
