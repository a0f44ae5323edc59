"""The wire between the grader (tools/grade.py) and the worker in its sandbox
(tools/grade_worker.py): the job one sends, the records the other sends back, how values travel
in both, and the statuses a graded exercise can have. Both sides import this module, so the
protocol is written down here alone.

The job, one JSON object on the worker's standard input (`job_message`, `read_job`):

    {"chapter": "ch01_attention" | null, "cells": [source, ...], "call_timeout": seconds,
     "calls": [{"id": "1.2", "name": "my_attention", "cases": encoded [(args, kwargs), ...]}]}

The records, one JSON line each, on the file descriptor the grader names (`line`):

    {"cell": 3, "raised": null | "ZeroDivisionError: division by zero"}    a cell ran
    {"exercise": "1.2", "missing": "my_attention"}     the notebook defines no such function
    {"exercise": "1.2", "outcomes": [outcome, ...]}    what each call gave, in the cases' order
    {"done": true}                                     the last line (`DONE`)

and an outcome is {"value": encoded value}, {"raised": [kind, message]} or {"timed_out": seconds}.
The student's code can write on the same descriptor, so the grader keeps only the lines of these
shapes (`read_records`), and reads each outcome as untrusted (`outcome`).

The values carry data and no code (no pickle): None, booleans, numbers, strings, lists, tuples,
dicts, tensors (dtype, shape, device and the raw bytes) and dataclasses (their fields, and the
class's name: `decode` rebuilds only the book's own). Anything else travels as its type's name
alone, so a hint can still say "you returned a ndarray".
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import math
from enum import StrEnum
from typing import Any

from annotated.exercises import Raised, Returned, TimedOut

MAX_DEPTH = 20
MAX_TENSOR_BYTES = 16 * 2**20  # one returned tensor; a larger one travels as its type's name


class Status(StrEnum):
    """A graded exercise's result. The first four are annotated.exercises.judge's own words
    (`Status(word)` reads them); ERROR is the grader's: the cell raised, or the process ended."""

    PASS = "pass"
    FAIL = "fail"
    NOT_DONE = "not done"
    TIMED_OUT = "timed out"
    ERROR = "error"


# --- the job ------------------------------------------------------------------------------------


def job_message(
    chapter: str | None, cells: list[str], call_timeout: float, calls: list[tuple[str, str, list]]
) -> bytes:
    """The job for one notebook; `calls` holds (exercise id, function name, cases) triples."""
    job = {
        "chapter": chapter,
        "cells": cells,
        "call_timeout": call_timeout,
        "calls": [{"id": e, "name": name, "cases": encode(cases)} for e, name, cases in calls],
    }
    return json.dumps(job).encode()


def read_job(text: str) -> dict:
    """`job_message`'s job, its calls' cases still encoded (`call_cases` decodes one call's)."""
    return json.loads(text)


def call_cases(call: dict) -> list:
    """One call's (args, kwargs) pairs. The grader wrote them, so any module's dataclass is rebuilt."""
    return decode(call["cases"], book_only=False)


# --- the records --------------------------------------------------------------------------------


def cell_record(number: int, raised: str | None) -> dict:
    return {"cell": number, "raised": raised}


def missing_record(exercise: str, name: str) -> dict:
    return {"exercise": exercise, "missing": name}


def answer_record(exercise: str, outcomes: list[dict]) -> dict:
    return {"exercise": exercise, "outcomes": outcomes}


def returned(value: Any) -> dict:
    return {"value": encode(value)}


def raised(kind: str, message: str) -> dict:
    return {"raised": [kind, message]}


def timed_out(seconds: float) -> dict:
    return {"timed_out": seconds}


DONE_RECORD = {"done": True}


def line(record: dict) -> str:
    """A record as the worker writes it: one JSON line."""
    return json.dumps(record) + "\n"


DONE = line(DONE_RECORD).encode()  # the worker's last line: what lingers after it is not waited for


def read_records(data: bytes) -> list[dict]:
    """The JSON lines the worker sent, those of a shape the grader reads: the student's code can
    write on the same channel, so a line that is not JSON or not of a known shape is skipped."""
    records = []
    for text in data.split(b"\n"):
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if known_shape(record):
            records.append(record)
    return records


def known_shape(record: Any) -> bool:
    """Whether `record` is a cell's, an exercise's or the last line (its outcomes aside: those
    are read one by one, by `outcome`)."""
    if not isinstance(record, dict):
        return False
    if "cell" in record:
        return type(record["cell"]) is int and isinstance(record.get("raised"), str | None)
    if "exercise" in record:
        return isinstance(record["exercise"], str) and (
            isinstance(record.get("outcomes"), list) or isinstance(record.get("missing"), str)
        )
    return record == DONE_RECORD


def outcome(item: Any) -> Returned | Raised | TimedOut:
    """One call's record as annotated.exercises' Returned, Raised or TimedOut; ValueError (or
    another error of the reading) for one of no known kind."""
    if not isinstance(item, dict):
        raise ValueError("an outcome that is not a record")
    if "value" in item:
        return Returned(decode(item["value"]))
    if "raised" in item:
        kind, message = item["raised"]
        return Raised(str(kind)[:80], str(message)[:200])
    if "timed_out" in item:
        return TimedOut(float(item["timed_out"]))
    raise ValueError("an outcome of no known kind")


# --- the values ---------------------------------------------------------------------------------


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
