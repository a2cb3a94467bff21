"""``fj.train``: the training loop people write in a notebook, with a progress bar, a history of
every fetched scalar, a live curve and an evaluation at each epoch's end.

It is a convenience, not a framework: it only calls ``exe.run`` on the programs you built, so the
loop stays as easy to write by hand as before::

    for epoch in range(epochs):
        for batch in reader():
            loss, = exe.run(main, feed=feeder.feed(batch), fetch_list=[avg_cost])

The progress bar is ``tqdm.auto`` (a widget in Jupyter, text in a terminal). The live curve is
drawn only inside a Jupyter kernel with matplotlib installed, redrawn in place at most once per
``plot_every`` seconds (and once at the end), so plotting never slows training down much.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..ir.program import Program
from .data_feeder import DataFeeder
from .seed_variable import Variable


class History:
    """What :func:`train` recorded.

    - ``steps[name]``: the value of each fetched scalar at every step;
    - ``epochs[name]``: its mean over each epoch;
    - ``test[name]``: the test program's value at each epoch's end (mean over the test batches,
      weighted by batch size);
    - ``labels[name]``: what the value is, for titles and the progress bar: the key the user gave
      (``fetch_list={"loss": avg_cost}``), else what made it (``loss`` for the loss being
      minimized, ``accuracy``, ``mean of cross_entropy``; see :func:`describe_fetch`);
    - ``history[name]`` is ``steps[name]`` (``name`` may also be a label or a ``Variable``);
      ``plot()`` draws the curves.

    ``name`` is the user's key for a ``fetch_list`` given as a dict, else the variable's name.
    """

    def __init__(self) -> None:
        self.steps: dict[str, list[float]] = {}
        self.epochs: dict[str, list[float]] = {}
        self.test: dict[str, list[float]] = {}
        self.labels: dict[str, str] = {}
        self.epoch_ends: list[int] = []          # step count at each epoch's end

    def _key(self, name) -> str:
        name = name.name if isinstance(name, Variable) else name
        if name in self.steps or name in self.test:
            return name
        by_label = [k for k, label in self.labels.items() if label == name]
        return by_label[0] if len(by_label) == 1 else name

    def label(self, name: str) -> str:
        """What ``name``'s values are (its title in ``plot()``)."""
        return self.labels.get(name, name)

    def __getitem__(self, name) -> list[float]:
        return self.steps[self._key(name)]

    def __contains__(self, name) -> bool:
        return self._key(name) in self.steps

    def __repr__(self) -> str:
        last = ", ".join(f"{self.label(k)}={v[-1]:.4g}" for k, v in self.epochs.items() if v)
        test = ", ".join(f"test {self.label(k)}={v[-1]:.4g}" for k, v in self.test.items() if v)
        return (f"<History: {len(self.epoch_ends)} epoch(s), {self.n_steps} steps"
                + (f"; {last}" if last else "") + (f"; {test}" if test else "") + ">")

    @property
    def n_steps(self) -> int:
        return max((len(v) for v in self.steps.values()), default=0)

    def figure(self):
        """A matplotlib ``Figure`` of the curves: one panel per fetched scalar (titled with its
        label), training steps (light), their running mean, and the test values at the epoch
        ends. Not registered with ``pyplot`` (nothing shows it twice); its PNGs carry the
        panel titles as their ``Title`` text."""
        from matplotlib.figure import Figure

        names = list(self.steps)[:4]
        fig = Figure(figsize=(4.2 * max(len(names), 1), 3.0), dpi=80)
        _titled_canvas()(fig)
        for i, name in enumerate(names):
            ax = fig.add_subplot(1, max(len(names), 1), i + 1)
            ys = np.asarray(self.steps[name], dtype=float)
            if len(ys):
                xs = np.arange(1, len(ys) + 1)
                ax.plot(xs, ys, color="#9db4d8", linewidth=0.8, label="step")
                k = max(1, len(ys) // 20)
                smooth = np.convolve(ys, np.ones(k) / k, mode="valid")
                ax.plot(xs[k - 1:], smooth, color="#1f4e9c", linewidth=1.5, label=f"mean of {k}")
            if self.test.get(name):
                ax.plot(self.epoch_ends[:len(self.test[name])], self.test[name], "o-", color="#c0392b",
                        label="test")
            ax.set_title(self.label(name), fontsize=10)
            ax.set_xlabel("step")
            ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    def plot(self):
        """Draw the curves: returns the matplotlib ``Figure``, which Jupyter shows once, as the
        cell's result (the figure is not a ``pyplot`` figure, so it is not shown again when the
        cell ends, and it holds no memory in ``pyplot`` once dropped)."""
        return self.figure()


_CANVAS = None


def _titled_canvas():
    """An Agg canvas whose PNGs carry the axes' titles as PNG ``Title`` text (a reader of the
    PNG alone — a test, a screen reader — sees what is plotted)."""
    global _CANVAS
    if _CANVAS is None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        class TitledCanvas(FigureCanvasAgg):
            def print_png(self, filename_or_obj, *, metadata=None, pil_kwargs=None, **_unused):
                # _unused: what print_figure hands a backend outside matplotlib (dpi, orientation...),
                # which Agg's print_png does not take
                titles = [ax.get_title() for ax in self.figure.axes if ax.get_title()]
                metadata = {"Title": "; ".join(titles), **(metadata or {})}
                return super().print_png(filename_or_obj, metadata=metadata, pil_kwargs=pil_kwargs)

        _CANVAS = TitledCanvas
    return _CANVAS


def describe_fetch(program: Program, name: str) -> str:
    """A reader's name for fetched variable ``name`` of ``program``: ``loss`` for the loss that
    the program's backward starts from (the variable whose ``@GRAD`` a loss-role op fills),
    else the op that wrote it — ``accuracy``, ``mean of cross_entropy`` (a mean names what it
    averages) — else ``name`` itself."""
    block = program.global_block()
    ops = list(block.ops)
    from ..ir.names import OP_ROLE_LOSS

    for op in ops:
        if int(op.attrs.get("op_role", 0) or 0) & OP_ROLE_LOSS and f"{name}@GRAD" in op.output_arg_names:
            return "loss"

    def writer(var):
        for op in reversed(ops):
            for slot, names in op.outputs.items():
                if var in names:
                    return op, slot
        return None, None

    op, slot = writer(name)
    if op is None:
        return name
    what = op.type if slot == "Out" or slot.lower() in op.type else f"{op.type} {slot.lower()}"
    if op.type in ("mean", "reduce_mean", "reduce_sum", "sum") and op.input_arg_names:
        inner, _ = writer(op.input_arg_names[0])
        verb = "sum" if "sum" in op.type else "mean"
        return f"{verb} of {inner.type if inner is not None else op.input_arg_names[0]}"
    return what


def _names(fetch_list: Sequence[Variable | str] | Mapping[str, Variable | str]) -> list[str]:
    """The variable names fetched."""
    items = fetch_list.values() if isinstance(fetch_list, Mapping) else fetch_list
    return [f.name if isinstance(f, Variable) else str(f) for f in items]


def _keys(fetch_list, program: Program) -> tuple[list[str], dict[str, str]]:
    """The history's keys of ``fetch_list`` (the user's dict keys, else variable names) and
    their labels (the keys, else :func:`describe_fetch`; a label shared by two is qualified
    with the variable's name)."""
    names = _names(fetch_list)
    if isinstance(fetch_list, Mapping):
        keys = [str(k) for k in fetch_list]
        return keys, dict(zip(keys, keys))
    labels = {n: describe_fetch(program, n) for n in names}
    counts: dict[str, int] = {}
    for label in labels.values():
        counts[label] = counts.get(label, 0) + 1
    return names, {n: (label if counts[label] == 1 else f"{label} ({n})") for n, label in labels.items()}


def _scalar(value: Any) -> float | None:
    arr = np.asarray(value)
    return float(arr.reshape(())) if arr.size == 1 else None


def _batch_size(feed: Mapping[str, Any]) -> int:
    for value in feed.values():
        shape = value.shape() if callable(getattr(value, "shape", None)) else np.shape(value)
        if len(shape):
            return int(shape[0])
    return 1


class _LivePlot:
    """The history's figure, redrawn in place in a Jupyter output at a bounded rate."""

    def __init__(self, history: History, every: float) -> None:
        self.history, self.every = history, every
        self.handle = None
        self.last = 0.0
        try:
            from IPython import get_ipython
            from IPython.display import Image, display
            import matplotlib  # noqa: F401
        except ImportError:
            return
        shell = get_ipython()
        if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
            return  # a terminal or a script: no plot
        self._image, self._display = Image, display

    @property
    def active(self) -> bool:
        return hasattr(self, "_image")

    def update(self, force: bool = False) -> None:
        if not self.active or not self.history.steps:
            return
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        self.last = now
        buf = io.BytesIO()
        self.history.figure().savefig(buf, format="png")
        image = self._image(data=buf.getvalue(), format="png")
        if self.handle is None:
            self.handle = self._display(image, display_id=True)
        else:
            self.handle.update(image)


def train(exe, program: Program, reader: Callable[[], Iterable[Any]],
          fetch_list: Sequence[Variable | str] | Mapping[str, Variable | str],
          epochs: int = 1, *, feed_order: Sequence[Variable | str] | None = None, feeder: DataFeeder | None = None,
          scope=None, test_program: Program | None = None, test_reader: Callable[[], Iterable[Any]] | None = None,
          test_fetch_list: Sequence[Variable | str] | Mapping[str, Variable | str] | None = None,
          live_plot: bool = True,
          plot_every: float = 1.0, progress: bool = True) -> History:
    """Run ``program`` over ``reader`` for ``epochs`` epochs and return the :class:`History`.

    ``reader()`` yields batches: a feed dict, or a list of samples converted by ``feeder``
    (default: a :class:`DataFeeder` of ``feed_order``, else of the program's data variables in
    the order they were declared). Each step fetches ``fetch_list``; its scalars go into the
    history and the progress bar. ``fetch_list`` may be a dict ``{"loss": avg_cost, ...}``: its
    keys name the values in the history, the bar and the plot's titles; a list's values are named
    by what made them (``loss``, ``accuracy``, ...; :func:`describe_fetch`). At each epoch's end,
    ``test_program`` runs over ``test_reader`` fetching ``test_fetch_list`` (default: the
    fetched variables it has). In Jupyter a live curve redraws at most once per ``plot_every``
    seconds when ``live_plot``.

    >>> history = fj.train(exe, main, fj.batch(train_reader, 64), {"loss": avg_cost, "accuracy": acc},
    ...                    epochs=3, test_program=test, test_reader=test_batches)  # doctest: +SKIP
    >>> history.test["accuracy"][-1]  # doctest: +SKIP
    """
    from tqdm.auto import tqdm

    if feeder is None:
        order = feed_order if feed_order is not None else [
            v for v in program.global_block().vars.values() if getattr(v, "is_data", False)]
        feeder = DataFeeder(list(order), program=program)
    names = _names(fetch_list)
    keys, labels = _keys(fetch_list, program)
    if test_fetch_list is None and test_program is not None:
        test_fetch = {k: n for k, n in zip(keys, names) if test_program.global_block().find_var(n) is not None}
    elif test_fetch_list is not None and not isinstance(test_fetch_list, Mapping):
        test_keys, test_labels = _keys(test_fetch_list, test_program)
        labels = {**test_labels, **labels}
        test_fetch = dict(zip(test_keys, _names(test_fetch_list)))
    else:
        test_fetch = test_fetch_list
    history = History()
    history.labels.update(labels)
    plot = _LivePlot(history, plot_every) if live_plot else None
    total = None
    for epoch in range(epochs):
        sums: dict[str, float] = {}
        steps = 0
        bar = tqdm(total=total, desc=f"epoch {epoch + 1}/{epochs}", disable=not progress, leave=True)
        try:
            for batch in reader():
                feed = batch if isinstance(batch, Mapping) else feeder.feed(batch)
                values = exe.run(program, feed=feed, fetch_list=names, scope=scope)
                shown = {}
                for name, value in zip(keys, values):
                    x = _scalar(value)
                    if x is None:
                        continue
                    history.steps.setdefault(name, []).append(x)
                    sums[name] = sums.get(name, 0.0) + x
                    shown[labels[name]] = f"{x:.4g}"
                steps += 1
                bar.set_postfix(shown, refresh=False)
                bar.update(1)
                if plot is not None:
                    plot.update()
        finally:
            bar.close()
        total = steps
        history.epoch_ends.append(history.n_steps)
        for name, s in sums.items():
            history.epochs.setdefault(name, []).append(s / max(steps, 1))
        if test_program is not None and test_reader is not None:
            for name, value in evaluate(exe, test_program, test_reader, test_fetch,
                                        feeder=feeder, scope=scope).items():
                history.test.setdefault(name, []).append(value)
        if plot is not None:
            plot.update(force=True)
    return history


def evaluate(exe, program: Program, reader: Callable[[], Iterable[Any]],
             fetch_list: Sequence[Variable | str] | Mapping[str, Variable | str],
             *, feeder: DataFeeder | None = None, feed_order: Sequence[Variable | str] | None = None,
             scope=None) -> dict[str, float]:
    """The mean of each fetched scalar over ``reader``'s batches, weighted by batch size, by
    variable name (by key when ``fetch_list`` is a dict)."""
    if feeder is None:
        order = feed_order if feed_order is not None else [
            v for v in program.global_block().vars.values() if getattr(v, "is_data", False)]
        feeder = DataFeeder(list(order), program=program)
    names = _names(fetch_list)
    keys = [str(k) for k in fetch_list] if isinstance(fetch_list, Mapping) else names
    sums = dict.fromkeys(keys, 0.0)
    count = 0
    for batch in reader():
        feed = batch if isinstance(batch, Mapping) else feeder.feed(batch)
        n = _batch_size(feed)
        values = exe.run(program, feed=feed, fetch_list=names, scope=scope)
        for name, value in zip(keys, values):
            x = _scalar(value)
            if x is not None:
                sums[name] += x * n
        count += n
    return {name: s / max(count, 1) for name, s in sums.items()}
