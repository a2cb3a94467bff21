"""Splitting a fed batch of sequences over the devices of a data-parallel run (host side).

Paddle's ``ParallelExecutor`` splits every fed tensor by its *top-level sequences*
(``LoDTensor::SplitLoDTensor``; rows for a tensor without LoD): with ``B`` sequences and ``n``
places each place takes ``ceil(B / n)`` consecutive sequences, the last one what remains, with
their nested levels and rows. When that leaves a place with nothing (``ceil(B / ceil(B / n)) < n``:
10 sequences on 8 places give 5 shares of 2) Paddle refuses the batch
(``FeedAndSplitTensorIntoLocalScopes``: "The number of samples of current batch is less than
the count of devices"); so does :func:`paddle_shares`, with a :class:`~fluidjax.FeedError`.

A compiled step has one shape for every device, so each device's share is padded to buckets
that all devices (and, in a multi-process run, all processes) share: rows to a power of two,
inner LoD levels to a power of two of their sequence count (empty sequences at the end) and,
when the shares differ in size (or ``FLAGS_bucket_sequences`` is on), the top level to a power of
two of the largest share, the real count travelling with the offsets (``Offsets.count``, the
machinery of ``FLAGS_bucket_sequences``: ``docs/lod.md``). The per-device values are stacked
along a new leading axis, which the step splits over the mesh (``shard_map``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir.errors import FeedError
from .lod_value import LoDValue, Offsets, bucket


def paddle_shares(batch: int, places: int, name: str = "") -> list[int]:
    """How many top-level sequences (rows, for a tensor without LoD) each of ``places`` takes of a
    batch of ``batch``: Paddle's rule, ``ceil(batch / places)`` each, the last place the rest.
    A batch that leaves a place without any is a :class:`FeedError`, as Paddle refuses it.

    >>> paddle_shares(15, 8)
    [2, 2, 2, 2, 2, 2, 2, 1]
    """
    if places < 1:
        raise ValueError(f"paddle_shares: {places} places")
    if batch == 0:
        raise FeedError(f"feed {name!r} has an empty batch: a data-parallel run gives every device a share; feed "
                        "at least one sequence per device")
    step = -(-batch // places)
    used = -(-batch // step)
    if used != places:
        fits = sorted({b for b in range(places, places * (step + 1) + 1) if -(-b // -(-b // places)) == places})
        near = [b for b in fits if abs(b - batch) <= places][:4]
        raise FeedError(
            f"feed {name!r} has {batch} sequences (rows), which Paddle's split rule ({step} per device, the last "
            f"device the rest) spreads over {used} of the {places} devices of this data-parallel run; Paddle's "
            f"ParallelExecutor refuses such a batch too (\"the number of samples of current batch is less than the "
            f"count of devices\"). Feed a batch every device gets a share of (e.g. {near or [places]}), or give "
            "one feed dict per device (exe.run(compiled, feed=[dict, ...]))")
    return [min(step, batch - i * step) for i in range(places)]


def host_feed(value, var) -> tuple[np.ndarray, list[list[int]] | None]:
    """A fed value as the Executor converted it (a padded :class:`LoDValue` or an array) back to
    its real host data and LoD (Paddle's offsets; None for a tensor without LoD)."""
    if value.__class__ is not LoDValue:
        return np.asarray(value), None
    offsets = [np.asarray(o) for o in value.offsets]
    count = getattr(value.offsets, "count", None)
    top = offsets[0][: int(count) + 1] if count is not None else offsets[0]
    if not var.lod_level:            # a dense feed held as counted rows (FLAGS_bucket_sequences)
        return np.asarray(value.data)[: int(top[-1])], None
    lod = [top.tolist()]
    for arr in offsets[1:]:
        lod.append(arr[: lod[-1][-1] + 1].tolist())
    return np.asarray(value.data)[: lod[-1][-1]], lod


def split_host(data: np.ndarray, lod: list[list[int]] | None, shares: Sequence[int]) -> list:
    """``(data, lod)`` cut into consecutive pieces of ``shares`` top-level sequences (rows without
    LoD), each with its nested levels rebased to start at 0."""
    pieces = []
    begin = 0
    for count in shares:
        end = begin + count
        if lod is None:
            pieces.append((data[begin:end], None))
        else:
            lo, hi = begin, end
            levels = []
            for level in lod:
                part = np.asarray(level[lo:hi + 1], np.int64)
                levels.append((part - part[0]).tolist())
                lo, hi = int(part[0]), int(part[-1])
            pieces.append((data[lo:hi], levels))
        begin = end
    return pieces


def _longest(level: list[int]) -> int:
    arr = np.asarray(level, np.int64)
    return bucket(int((arr[1:] - arr[:-1]).max())) if len(arr) > 1 else 1


def share_sizes(pieces, counted: bool) -> list[int]:
    """The sizes the stacked value of one feed's ``pieces`` needs (each the largest over the
    devices): rows bucket, then per level its sequence bucket and its longest sequence's bucket."""
    rows = bucket(max(len(d) for d, _ in pieces))
    lod0 = pieces[0][1]
    if lod0 is None:
        return [bucket(max(len(d) for d, _ in pieces)) if counted else max(len(d) for d, _ in pieces)]
    sizes = [rows]
    for k in range(len(lod0)):
        n_seqs = max(len(lod[k]) - 1 for _, lod in pieces)
        sizes.append(bucket(n_seqs) if (k > 0 or counted) else n_seqs)
        sizes.append(max(_longest(lod[k]) for _, lod in pieces))
    return sizes


def stack_shares(pieces, sizes: Sequence[int], counted: bool, as_rows: bool):
    """One feed's per-device ``pieces`` padded to ``sizes`` (:func:`share_sizes`, agreed over all
    processes) and stacked along a new leading axis: a :class:`LoDValue` with [devices, ...] data
    and offsets, or an array. ``counted``: the top level (the rows of a dense feed, when
    ``as_rows``) padded, its real count per device carried (``Offsets.count``)."""
    lod0 = pieces[0][1]
    if lod0 is None:
        width = sizes[0]
        data = np.stack([_pad_rows(d, width) for d, _ in pieces])
        if not counted or not as_rows:
            return data
        offsets = np.asarray([[0, len(d)] for d, _ in pieces], np.int32)
        return LoDValue(data, Offsets((offsets,), (width,)))
    rows = sizes[0]
    data = np.stack([_pad_rows(d, rows) for d, _ in pieces])
    levels, longest = [], []
    for k in range(len(lod0)):
        width = sizes[1 + 2 * k] + 1
        levels.append(np.stack([_pad_level(lod[k], width) for _, lod in pieces]))
        longest.append(sizes[2 + 2 * k])
    count = np.asarray([len(lod[0]) - 1 for _, lod in pieces], np.int32) if counted else None
    return LoDValue(data, Offsets(levels, longest, count))


def _pad_rows(data: np.ndarray, rows: int) -> np.ndarray:
    if len(data) == rows:
        return data
    return np.concatenate([data, np.zeros((rows - len(data),) + data.shape[1:], data.dtype)])


def _pad_level(level: list[int], width: int) -> np.ndarray:
    arr = np.asarray(level, np.int32)
    if len(arr) < width:
        arr = np.concatenate([arr, np.full(width - len(arr), arr[-1], np.int32)])
    return arr


def merge_fetch(shards: list):
    """The per-device values of one fetch merged as Paddle's ``FetchOpHandle`` merges them: rows
    (and sequences, offsets rebased) concatenated in device order; 0-d values stacked."""
    from .lod_value import to_host
    datas, lods = [], []
    for value in shards:
        if value.__class__ is LoDValue:
            data, lod = to_host(value)
            datas.append(data)
            lods.append(lod)
        else:
            datas.append(np.asarray(value))
            lods.append(None)
    if lods[0] is None:
        if datas[0].ndim == 0:
            return np.stack(datas)
        return np.concatenate(datas)
    merged = []
    for k in range(len(lods[0])):
        level = [0]
        for lod in lods:
            base = level[-1]
            level.extend(base + o for o in lod[k][1:])
        merged.append(np.asarray(level, np.int32))
    return LoDValue(np.concatenate(datas), merged)


def merge_place_feeds(feeds: Sequence[dict]) -> tuple[dict, dict]:
    """Fluid's one-feed-dict-per-place form: ``(one feed dict, {name: shares})`` — every name's
    values concatenated in place order (LoD offsets rebased), and how many top-level sequences (or
    rows) each place gave, so that the split gives each place exactly its own dict."""
    from .lod_tensor import LoDTensor
    names = list(feeds[0])
    if any(set(f) != set(names) for f in feeds):
        raise FeedError("feed: the per-place feed dicts name different variables; give every place the same names")
    merged, shares = {}, {}
    for name in names:
        values = [f[name] for f in feeds]
        lods = [v.lod() if isinstance(v, LoDTensor) else [] for v in values]
        datas = [np.asarray(v.value() if isinstance(v, LoDTensor) else v) for v in values]
        if any(d.ndim == 0 for d in datas):
            raise FeedError(f"feed {name!r}: a per-place feed value is 0-d; a place's share needs rows")
        if any(lod for lod in lods):
            if any(len(lod) != len(lods[0]) for lod in lods):
                raise FeedError(f"feed {name!r}: the per-place LoDTensors have different numbers of LoD levels")
            levels = []
            for k in range(len(lods[0])):
                level = [0]
                for lod in lods:
                    base = level[-1]
                    level.extend(base + o for o in lod[k][1:])
                levels.append(level)
            tensor = LoDTensor()
            tensor.set(np.concatenate(datas))
            tensor.set_lod(levels)
            merged[name] = tensor
            shares[name] = [len(lod[0]) - 1 for lod in lods]
        else:
            merged[name] = np.concatenate(datas)
            shares[name] = [len(d) for d in datas]
        if any(s == 0 for s in shares[name]):
            raise FeedError(f"feed {name!r}: a place's feed dict gives no sequences (rows); every device needs a share")
    return merged, shares
