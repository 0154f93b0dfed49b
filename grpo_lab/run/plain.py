"""A checkpoint's state as plain containers, so state.pt loads with torch.load(weights_only=True): loading it
builds tensors, numbers, strings, lists, tuples and dicts, and nothing else, so it never runs code.

What weights_only cannot hold itself is written as a tagged dict and rebuilt exactly on load:

    numpy array or scalar   {TAG: "ndarray" | "numpy", "value": tensor (numeric) | nested list, "dtype": str}
    a dataclass of ours     {TAG: "dataclass", "type": "Problem", "value": {field: ...}}   (DATACLASSES only)
    set, frozenset          {TAG: "set" | "frozenset", "value": [...]}   (its members may be tagged: unhashable)
    a dict with other keys  {TAG: "dict", "value": [(key, value), ...]}   (keys not str/int/float/bool/None,
                                                                           or a key that is the tag itself)

`to_plain` refuses (TypeError naming where in the state) anything else, so a sampler that starts keeping a
new kind of object fails its first checkpoint in the tests rather than writing a state.pt that no resume can
read; `from_plain` refuses a tag it does not know. numpy's generators keep their state as dicts of ints
already (bit_generator.state); np.random.get_state() holds one array, rebuilt as the same uint32 array.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from grpo_lab.errors import InputError
from grpo_lab.records import Problem, Rollout

TAG = "__plain__"
# the dataclasses a state may hold, by name: a checkpoint names one of these, never a class to import
DATACLASSES: dict[str, type] = {cls.__name__: cls for cls in (Problem, Rollout)}
_SCALARS = (str, int, float, bool, complex, bytes, type(None))
_KEYS = (str, int, float, bool, type(None))


class BadCheckpoint(InputError):
    """A checkpoint's state that cannot be read (cut short, not a torch file, an unknown plain-state tag)."""


class UnsafeCheckpoint(BadCheckpoint):
    """A checkpoint file holding more than tensors and plain containers: loading it could run code, so it is not."""


def to_plain(obj: Any, where: str = "state") -> Any:
    """`obj` in the forms torch.load(weights_only=True) reads back; `where` names the spot in a refusal."""
    if isinstance(obj, np.ndarray | np.generic):  # before the scalars: np.float64 is a float, np.str_ a str
        kind = "numpy" if isinstance(obj, np.generic) else "ndarray"
        array = np.asarray(obj)
        if array.dtype.kind in "biufc":  # numbers and booleans: a tensor of the same dtype, bit for bit
            return {TAG: kind, "value": torch.from_numpy(np.array(array, order="C")), "dtype": array.dtype.str}
        if array.dtype.kind in "US":  # text and bytes: nested lists of Python strings
            return {TAG: kind, "value": array.tolist(), "dtype": array.dtype.str}
        raise TypeError(f"{where}: a numpy array of dtype {array.dtype} cannot be saved as plain data")
    if isinstance(obj, torch.Tensor) or type(obj) in _SCALARS:
        return obj
    if type(obj) is list:
        return [to_plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if type(obj) is tuple:
        return tuple(to_plain(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if type(obj) in (set, frozenset):
        return {TAG: type(obj).__name__, "value": [to_plain(v, f"{where}{{}}") for v in obj]}
    if type(obj) is dict:
        if all(type(k) in _KEYS for k in obj) and TAG not in obj:
            return {k: to_plain(v, f"{where}[{k!r}]") for k, v in obj.items()}
        return {TAG: "dict", "value": [(to_plain(k, f"{where}<key>"), to_plain(v, f"{where}[{k!r}]"))
                                       for k, v in obj.items()]}
    if dataclasses.is_dataclass(obj) and DATACLASSES.get(type(obj).__name__) is type(obj):
        return {TAG: "dataclass", "type": type(obj).__name__,
                "value": {f.name: to_plain(getattr(obj, f.name), f"{where}.{f.name}") for f in dataclasses.fields(obj)}}
    raise TypeError(f"{where}: a {type(obj).__module__}.{type(obj).__qualname__} cannot be saved as plain data "
                    f"(a dataclass of ours goes in grpo_lab/run/plain.py DATACLASSES; anything else: convert it in "
                    "the owner's state_dict)")


def from_plain(obj: Any) -> Any:
    """Rebuild what `to_plain` wrote (plain values come back as they are)."""
    if type(obj) is list:
        return [from_plain(v) for v in obj]
    if type(obj) is tuple:
        return tuple(from_plain(v) for v in obj)
    if type(obj) is not dict:
        return obj
    if TAG not in obj:
        return {k: from_plain(v) for k, v in obj.items()}
    kind, value = obj[TAG], obj.get("value")
    if kind in ("ndarray", "numpy"):
        dtype = np.dtype(str(obj["dtype"]))
        if dtype.kind not in "biufcUS":
            raise ValueError(f"a saved numpy array of dtype {dtype}: only numbers, booleans and text are saved")
        array = value.numpy().copy() if isinstance(value, torch.Tensor) else np.array(value, dtype=dtype)
        if array.dtype != dtype:
            raise ValueError(f"a saved numpy array says dtype {dtype} but holds {array.dtype}")
        return array[()] if kind == "numpy" else array
    if kind in ("set", "frozenset"):
        return (set if kind == "set" else frozenset)(from_plain(v) for v in value)
    if kind == "dict":
        return {from_plain(k): from_plain(v) for k, v in value}
    if kind == "dataclass" and obj.get("type") in DATACLASSES:
        cls = DATACLASSES[obj["type"]]
        fields = {k: from_plain(v) for k, v in value.items()}
        declared = {f.name: f for f in dataclasses.fields(cls)}
        if set(fields) != set(declared):
            raise ValueError(f"a saved {cls.__name__} with fields {sorted(fields)}, not {sorted(declared)}")
        made = cls(**{name: fields[name] for name, f in declared.items() if f.init})
        for name, f in declared.items():  # fields outside __init__ (none today): as the instance held them
            if not f.init:
                object.__setattr__(made, name, fields[name])
        return made
    raise ValueError(f"unknown plain-state tag {kind!r} (type {obj.get('type')!r}): written by a newer grpo-lab?")
