"""The student's side of `make grade`: runs one notebook's exercise cells and calls the student's
functions on the inputs the grader sent, inside the sandbox (tools/grade.py builds it).

Nothing here decides a grade. The grader writes a job on this process's standard input (JSON in
the wire format below: the chapter, the cells, and for each exercise the function's name and the
inputs); this process runs each cell in its own try, with the book's `check` made silent and
inert (a student's `check` lines decide nothing and cost no time), then calls each function on
each input under a time limit, and writes what came back on the file descriptor the grader names
(its one argument), one JSON line per
cell and per exercise. What the student's code prints goes nowhere. The grader compares the
values with the book's reference on its own side (annotated.exercises.judge).

The wire format carries data and no code (no pickle): None, booleans, numbers, strings, lists,
tuples, dicts, tensors (dtype, shape, device and the raw bytes) and dataclasses (their fields, and
the class's name: the grader rebuilds only the book's own). Anything else travels as its type's
name alone, so a hint can still say "you returned a ndarray".
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import importlib
import json
import math
import os
import signal
import sys
from typing import Any

MAX_DEPTH = 20
MAX_TENSOR_BYTES = 16 * 2**20  # one returned tensor; a larger one travels as its type's name


class Foreign:
    """A value of a type the wire does not carry, rebuilt as an object of a class of the same name."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


def _foreign(name: str) -> Foreign:
    clean = "".join(c for c in str(name)[:60] if c.isalnum() or c == "_") or "object"
    return type(clean, (Foreign,), {})()


def encode(value: Any, depth: int = 0) -> Any:
    """A JSON-able form of `value` (see the module docstring)."""
    import torch

    if depth > MAX_DEPTH:
        return {"$object": "deeply nested value"}
    if value is None or isinstance(value, bool | str):
        return str(value) if isinstance(value, str) else value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {"$float": repr(float(value))}
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return encode(value.item(), depth + 1)  # a NumPy scalar: its Python number
    if type(value) in (list, tuple):
        items = [encode(item, depth + 1) for item in value]
        return {"$list": items} if type(value) is list else {"$tuple": items}
    if type(value) is dict:
        return {"$dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if type(value) in (torch.Tensor, torch.nn.Parameter):
        return _encode_tensor(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: encode(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        }
        kind = type(value)
        return {"$dataclass": f"{kind.__module__}:{kind.__qualname__}", "fields": fields}
    return {"$object": type(value).__name__}


def _encode_tensor(tensor) -> dict:
    import torch

    device = str(tensor.device)
    if device == "meta" or tensor.is_sparse or tensor.is_quantized:
        return {
            "$tensor": {
                "dtype": str(tensor.dtype),
                "shape": list(tensor.shape),
                "device": device,
                "data": None,
            }
        }
    flat = tensor.detach().to("cpu").resolve_conj().resolve_neg().contiguous().reshape(-1)
    if flat.numel() * flat.element_size() > MAX_TENSOR_BYTES:
        return {"$object": "Tensor too large to send"}
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return {
        "$tensor": {
            "dtype": str(tensor.dtype),
            "shape": list(tensor.shape),
            "device": device,
            "data": base64.b64encode(raw).decode("ascii"),
        }
    }


def decode(value: Any, book_only: bool = True, depth: int = 0) -> Any:
    """`encode`'s value back. Dataclasses are rebuilt only when they are the book's own
    (annotated.*); with book_only=False (the grader's own job, on this side) any module's."""
    if depth > MAX_DEPTH:
        raise ValueError("too deeply nested")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        raise ValueError("a bare list on the wire")
    if not isinstance(value, dict) or len(value) not in (1, 2):
        raise ValueError("not a wire value")
    (tag, body), *rest = value.items()
    if tag == "$float":
        return float(body) if body in ("nan", "inf", "-inf") else _bad(body)
    if tag in ("$list", "$tuple"):
        items = [decode(item, book_only, depth + 1) for item in body]
        return items if tag == "$list" else tuple(items)
    if tag == "$dict":
        return {decode(k, book_only, depth + 1): decode(v, book_only, depth + 1) for k, v in body}
    if tag == "$tensor":
        return _decode_tensor(body)
    if tag == "$dataclass":
        return _decode_dataclass(body, dict(rest).get("fields", {}), book_only, depth)
    if tag == "$object":
        return _foreign(body)
    raise ValueError(f"unknown wire tag {tag!r}")


def _bad(body: Any):
    raise ValueError(f"not a float: {body!r}")


def _decode_tensor(body: dict):
    import torch

    dtype = getattr(torch, str(body["dtype"]).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {body['dtype']!r}")
    shape = [int(size) for size in body["shape"]]
    device = str(body["device"])
    if body["data"] is None:
        return torch.empty(shape, dtype=dtype, device="meta")
    raw = bytearray(base64.b64decode(body["data"], validate=True))
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    tensor = flat.view(dtype).reshape(shape)
    if device != "cpu":
        try:
            tensor = tensor.to(device)
        except (RuntimeError, ValueError):  # a device this side lacks: keep its name visible
            tensor = torch.empty(shape, dtype=dtype, device="meta")
    return tensor


def _decode_dataclass(name: str, fields: dict, book_only: bool, depth: int) -> Any:
    module_name, _, qualname = str(name).partition(":")
    values = {str(k): decode(v, book_only, depth + 1) for k, v in fields.items()}
    if not book_only or module_name == "annotated" or module_name.startswith("annotated."):
        try:
            kind: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                kind = getattr(kind, part)
            if dataclasses.is_dataclass(kind) and isinstance(kind, type):
                return kind(**values)
        except Exception:  # noqa: BLE001 - not the book's class after all: its name will do
            pass
    return _foreign(qualname.rsplit(".", 1)[-1])


class CallTimeout(BaseException):
    """Raised in a student's function that ran past its time limit."""


def _alarm(signum, frame):
    raise CallTimeout


def _silent_check(exercise, answer):
    """The book's `check`, made inert: under grading the grader judges, not the notebook."""
    return True


def run_cells(job: dict, emit) -> dict:
    """Each cell in its own try, in one namespace; emits what each cell did."""
    import annotated.exercises

    annotated.exercises.check = _silent_check
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    if job.get("chapter"):
        exec(f"from annotated.{job['chapter']} import *", namespace)
    for number, source in enumerate(job["cells"], start=1):
        try:
            exec(compile(source, f"cell {number}", "exec"), namespace)
            emit({"cell": number, "raised": None})
        except BaseException as error:  # noqa: BLE001 - SystemExit too: the cell, not the run, ends
            emit({"cell": number, "raised": _one_line(error)})
        namespace["check"] = _silent_check  # a cell's own `from ... import check` undone
    return namespace


def _one_line(error: BaseException) -> str:
    text = str(error).splitlines()[0][:200] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def call_answers(job: dict, namespace: dict, emit) -> None:
    """Each exercise's function on each input, each call under the job's time limit."""
    signal.signal(signal.SIGALRM, _alarm)
    for call in job["calls"]:
        answer = namespace.get(call["name"])
        if not callable(answer):
            emit({"exercise": call["id"], "missing": call["name"]})
            continue
        outcomes = []
        for args, kwargs in decode(call["cases"], book_only=False):
            outcome = _call_one(answer, args, kwargs, job["call_timeout"])
            outcomes.append(outcome)
            if "value" not in outcome:
                break
        emit({"exercise": call["id"], "outcomes": outcomes})


def _call_one(answer, args: tuple, kwargs: dict, seconds: float) -> dict:
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        value = answer(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        return {"value": encode(value)}
    except CallTimeout:
        return {"timed_out": seconds}
    except BaseException as error:  # noqa: BLE001 - SystemExit too: one input's result
        return {
            "raised": [type(error).__name__, str(error).splitlines()[0][:200] if str(error) else ""]
        }
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> None:
    job = json.loads(sys.stdin.read())
    descriptor = int(sys.argv[1])  # the results channel the grader passed
    channel = os.fdopen(os.dup(descriptor), "w", encoding="utf-8")
    os.close(descriptor)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # nothing the student prints goes anywhere
        os.dup2(devnull, fd)

    def emit(record: dict) -> None:
        channel.write(json.dumps(record) + "\n")
        channel.flush()

    namespace = run_cells(job, emit)
    call_answers(job, namespace, emit)
    emit({"done": True})
    channel.close()
    os._exit(0)  # no student's atexit hook or thread keeps the process alive


if __name__ == "__main__":
    main()
