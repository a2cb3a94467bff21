"""Run-time flags with Paddle's names: ``fj.set_flags({"FLAGS_check_nan_inf": True})``.

``FLAGS_check_nan_inf`` (default off; also read from the environment variable of the same name
at import) makes every run check every op's floating-point outputs for NaN and Inf. A failing
run raises :class:`~fluidjax.NumericCheckError` naming the first op, its output variable and the
user's file and line, and leaves the scope as it was before the run.

``FLAGS_check_index`` (default on; fluidjax's own flag) makes index-taking ops (labels of
``cross_entropy`` / ``softmax_with_cross_entropy``, ids of ``lookup_table``, ``gather`` indices,
``one_hot`` ids, ...) check that every index is in range: an out-of-range label raises
:class:`~fluidjax.IndexOutOfRangeError` instead of training on NaN. Its cost is one reduction
per such op, a select per updated state buffer (fused by XLA into the update) and one tiny
device-to-host read per run; ``docs/reliability.md`` gives the measured figures.

``FLAGS_fetch_0d_as_1d`` (default off; fluidjax's own flag) gives fetched 0-d results (a mean,
an accuracy, a full reduction) Fluid 1.x's shape ``[1]`` instead of Paddle 2.6's ``()``. Off, a
fetched 0-d result already answers ``value[0]`` (:mod:`.fetched`); the one Fluid 1.x idiom that
needs the flag is copying it first, ``np.array(value)[0]``. It changes only what the host gets.

``FLAGS_max_array_room`` (default ``2**20``; fluidjax's own flag) is the most elements a tensor
array written inside a loop (or at an index computed at run time) may be given. Such an array's
room is fixed when the step compiles; a run that writes past it is done again, before anything
is committed, with the room doubled (at least to the index written), and the room stays for
later runs. Past this cap the run raises :class:`~fluidjax.BoundExceededError` naming the write
op and its line, and the scope is unchanged (``docs/reliability.md``, "Bounds").

``FLAGS_max_while_iterations`` (default 0, no bound; fluidjax's own flag) stops every ``while``
loop after that many iterations and makes the run raise :class:`~fluidjax.LoopBoundError` naming
the op, its line and the bound; the scope is unchanged. It is an argument of the step, read per
run (no recompilation); see ``lowering/interrupt.py``.

``FLAGS_bucket_sequences`` (default on; fluidjax's own flag) pads the number of top-level
sequences of every LoD feed to a bucket (empty sequences), a dense feed with one row per
sequence to the same bucket as counted rows, and a dense feed whose first dim keeps changing
(BERT's masked positions) to a bucket of it as counted rows, so a reader batching by token count
compiles once per bucket instead of once per sequence count; a step with an op that would not
honour the padding keeps the exact sizes (``docs/lod.md``, "Bucketing the sequence count").

``FLAGS_lod_row_buckets`` (default 1; fluidjax's own flag) is how many row counts each octave of
a fed LoD value's rows is split into: 1 pads the rows to the next power of two; ``k`` rounds real
rows in (``2**m``, ``2**(m+1)``] up to the next of ``k`` even steps (a multiple of ``2**m / k`` for
``k`` a power of two; rows above
``lod_value.FINE_ROWS_FROM`` = 1024 only), so row-wise ops (fc, activations, their gradients)
compute on at most ``1/k`` of an octave of padding, at the price of up to ``k`` times the
compilations (``docs/lod.md``, "Finer row buckets"). Offsets and results are unchanged.

``FLAGS_fast_run`` (default on; fluidjax's own flag) lets a run that repeats the last one's
program, scope, feed and fetch signature take the prepared fast path (``Executor._run_fast``;
``docs/reliability.md``, "The per-run floor"); off, every run takes the general path.

``FLAGS_pack_small_state`` (default on; fluidjax's own flag): a step holds its one-element
read-and-written state (Adam's beta powers, AMP's loss-scaling counters) in one array per dtype,
so it takes and gives one argument for them instead of one each (``lowering/packed_state.py``;
``docs/training.md``). It applies to the plans made after it is set; the values in the scope are
the same either way.

The check flags are part of the compiled step's cache key: changing one recompiles on the next run.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

_DEFAULTS = {"FLAGS_check_nan_inf": False, "FLAGS_check_index": True, "FLAGS_fetch_0d_as_1d": False,
             "FLAGS_max_array_room": 1 << 20, "FLAGS_max_while_iterations": 0,
             "FLAGS_bucket_sequences": True, "FLAGS_fast_run": True, "FLAGS_pack_small_state": True,
             "FLAGS_lod_row_buckets": 1}
# Counts where 0 means "no bound" (the other integer flags are positive sizes).
_COUNTS = frozenset({"FLAGS_max_while_iterations"})
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

_values: dict[str, bool] = {}
# (check_nan_inf, check_index): read on every run, so kept as one tuple.
mode: tuple[bool, bool] = (False, True)


def _parse(name: str, value: Any) -> bool | int:
    if name in _COUNTS:
        return _parse_count(name, value)
    if type(_DEFAULTS.get(name)) is int:            # a size: a positive integer
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit() \
                or int(value) <= 0:
            raise ValueError(f"flag {name} takes a positive integer, got {value!r}")
        return int(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, (int,)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"flag {name} takes a boolean (True/False, 1/0, 'true'/'false'), got {value!r}")


def _parse_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit() \
            or not 0 <= int(value) < 2**31:
        raise ValueError(f"flag {name} takes an integer from 0 (no bound) to 2**31 - 1, got {value!r}")
    return int(value)


# FLAGS_fetch_0d_as_1d: read by every fetch (lowering/fetched.py).
fetch_0d_as_1d: bool = False
# FLAGS_max_array_room: read when a run's array room must grow (lowering/executor.py).
max_array_room: int = 1 << 20
# FLAGS_max_while_iterations: read by every run of a step with a while loop (lowering/interrupt.py).
max_while_iterations: int = 0
bucket_sequences: bool = True
# FLAGS_fast_run: whether a repeated exe.run may take the prepared fast path (Executor._run_fast).
fast_run: bool = True
# FLAGS_pack_small_state: whether new plans pack their one-element state (lowering/packed_state.py).
pack_small_state: bool = True
# FLAGS_lod_row_buckets: read by every LoD feed (lod_value.row_bucket).
lod_row_buckets: int = 1


def _refresh() -> None:
    global mode, fetch_0d_as_1d, max_array_room, max_while_iterations, bucket_sequences, fast_run
    global pack_small_state, lod_row_buckets
    mode = (_values["FLAGS_check_nan_inf"], _values["FLAGS_check_index"])
    fetch_0d_as_1d = _values["FLAGS_fetch_0d_as_1d"]
    max_array_room = _values["FLAGS_max_array_room"]
    max_while_iterations = _values["FLAGS_max_while_iterations"]
    bucket_sequences = _values["FLAGS_bucket_sequences"]
    fast_run = _values["FLAGS_fast_run"]
    pack_small_state = _values["FLAGS_pack_small_state"]
    lod_row_buckets = _values["FLAGS_lod_row_buckets"]


def set_flags(flags: Mapping[str, Any]) -> None:
    """Set run-time flags, as ``paddle.set_flags``; an unknown name is a ``ValueError``."""
    if not isinstance(flags, Mapping):
        raise TypeError(f"set_flags takes a dict of flag name -> value, got {type(flags).__name__}")
    parsed = {}
    for name, value in flags.items():
        if name not in _DEFAULTS:
            raise ValueError(f"unknown flag {name!r}; fluidjax's flags are {sorted(_DEFAULTS)}")
        parsed[name] = _parse(name, value)
    _values.update(parsed)
    _refresh()


def get_flags(names: str | Iterable[str] | None = None) -> dict[str, bool]:
    """The current values of ``names`` (all flags when None), as ``paddle.get_flags``."""
    if names is None:
        names = list(_DEFAULTS)
    elif isinstance(names, str):
        names = [names]
    out = {}
    for name in names:
        if name not in _DEFAULTS:
            raise ValueError(f"unknown flag {name!r}; fluidjax's flags are {sorted(_DEFAULTS)}")
        out[name] = _values[name]
    return out


def _init_from_environment() -> None:
    _values.update(_DEFAULTS)
    for name in _DEFAULTS:
        if name in os.environ:
            _values[name] = _parse(name, os.environ[name])
    _refresh()


_init_from_environment()
