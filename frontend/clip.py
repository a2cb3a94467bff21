"""Gradient clipping, emitted as ops the way Paddle 2.6 static mode emits them.

Give one to an optimizer as ``grad_clip=``; it runs on the ``(param, grad)`` pairs after the
backward pass, before regularization and the update. Parameters created with
``ParamAttr(need_clip=False)`` are left alone.

- :class:`ClipGradByValue` — a ``clip`` op per gradient;
- :class:`ClipGradByNorm` — a ``clip_by_norm`` op per gradient (each gradient's own L2 norm);
- :class:`ClipGradByGlobalNorm` — ``squared_l2_norm`` per gradient, ``sum``, ``sqrt``,
  ``fill_constant``, ``elementwise_max`` and ``elementwise_div`` for the common factor
  ``clip_norm / max(clip_norm, global_norm)``, then ``elementwise_mul`` of each gradient in place.

>>> # fj.optimizer.SGD(0.1, grad_clip=fj.clip.ClipGradByGlobalNorm(clip_norm=1.0))

Fluid 1.x's names are here too: :class:`GradientClipByValue`, :class:`GradientClipByNorm` and
:class:`GradientClipByGlobalNorm` (the same clipping, with Fluid's ``need_clip(param) -> bool``
filter), :func:`set_gradient_clip` (a clip per parameter, also given by
``ParamAttr(gradient_clip=...)``, applied by ``minimize`` when the optimizer has no ``grad_clip``)
and :class:`ErrorClipByValue` (clips the gradient of one forward variable as the backward pass
computes it).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Callable, Iterator, Sequence

from ..ir import dtypes, unique_name
from ..ir.program import OP_ROLE_LRSCHED, OP_ROLE_OPTIMIZE
from ..ir.variable import Variable
from .initializer import fill_constant_attrs

__all__ = ["GradientClipBase", "ClipGradByValue", "ClipGradByNorm", "ClipGradByGlobalNorm", "GradientClipByValue",
           "GradientClipByNorm", "GradientClipByGlobalNorm", "ErrorClipByValue", "set_gradient_clip"]

ParamsGrads = Sequence[tuple[Variable, Variable | None]]


@contextlib.contextmanager
def optimize_guard(block, param: Variable | None = None, grad: Variable | None = None) -> Iterator[None]:
    """Ops appended to ``block`` inside get ``op_role`` Optimize and, for a parameter, Paddle's
    ``op_role_var = [param, grad]`` (which names the pair an op updates)."""
    program = block.program
    previous = program._op_role
    program._op_role = OP_ROLE_OPTIMIZE
    start = len(block.ops)
    try:
        yield
    finally:
        program._op_role = previous
        if param is not None and grad is not None:
            for op in block.ops[start:]:
                # Learning-rate ops (Optimize|LRSched) keep an empty op_role_var, as in Paddle.
                if not op.attrs.get("op_role_var") and not int(op.attrs.get("op_role", 0)) & OP_ROLE_LRSCHED:
                    op.set_attr("op_role_var", [param.name, grad.name], kind="strings")


def _tmp(block, prefix: str, shape, dtype) -> Variable:
    """A temporary named as Paddle's layer helpers name it (``clip_by_norm_0.tmp_0``)."""
    name = unique_name.generate(unique_name.generate(prefix) + ".tmp")
    return block.create_var(name, shape, dtype, stop_gradient=False)


def _clippable(param: Variable, grad: Variable | None) -> bool:
    return grad is not None and getattr(param, "need_clip", True)


def _to_clip(params_grads, kept: list):
    """The pairs to clip; pairs whose parameter opts out (``need_clip=False``) go to ``kept`` as
    they are, pairs without a gradient are dropped."""
    for param, grad in params_grads:
        if grad is None:
            continue
        if _clippable(param, grad):
            yield param, grad
        else:
            kept.append((param, grad))


class GradientClipBase:
    """Base class: ``clip(params_grads)`` appends ops and returns the new ``(param, grad)`` pairs."""

    # Fluid 1.x's filter: need_clip(param) -> bool; None clips every parameter.
    _need_clip_func: Callable | None = None

    def __call__(self, params_grads: ParamsGrads) -> list[tuple[Variable, Variable]]:
        params_grads = list(params_grads)
        keep = self._need_clip_func
        if keep is None:
            return self._static_clip(params_grads)
        chosen = [(p, g) for p, g in params_grads if g is not None and keep(p)]
        clipped = {p.name: (p, g) for p, g in self._static_clip(chosen)}
        return [clipped.get(p.name, (p, g)) for p, g in params_grads if g is not None]

    def _static_clip(self, params_grads):
        raise NotImplementedError

    @staticmethod
    def _each_grad(params_grads, op_type: str, attrs: dict):
        """Clip every clippable gradient on its own with one ``op_type`` op; keep the others."""
        out = []
        for param, grad in _to_clip(params_grads, out):
            block = grad.block
            with optimize_guard(block, param, grad):
                new = _tmp(block, op_type, grad.shape, grad.dtype)
                block.append_op(op_type, {"X": grad}, {"Out": new}, attrs)
            out.append((param, new))
        return out


class ClipGradByValue(GradientClipBase):
    """Limit every gradient element to ``[min, max]`` (``min`` defaults to ``-max``)."""

    def __init__(self, max: float, min: float | None = None) -> None:
        if min is None:
            if max <= 0.0:
                raise ValueError(f"ClipGradByValue without min needs max > 0, got max={max}")
            min = -max
        self.max, self.min = float(max), float(min)

    def _static_clip(self, params_grads):
        return self._each_grad(params_grads, "clip", {"min": self.min, "max": self.max})

    def __repr__(self) -> str:
        return f"ClipGradByValue(min={self.min}, max={self.max})"


class ClipGradByNorm(GradientClipBase):
    """Rescale each gradient whose L2 norm exceeds ``clip_norm`` to norm ``clip_norm``."""

    def __init__(self, clip_norm: float) -> None:
        self.clip_norm = float(clip_norm)

    def _static_clip(self, params_grads):
        return self._each_grad(params_grads, "clip_by_norm", {"max_norm": self.clip_norm})

    def __repr__(self) -> str:
        return f"ClipGradByNorm(clip_norm={self.clip_norm})"


class ClipGradByGlobalNorm(GradientClipBase):
    """Scale all gradients by ``clip_norm / max(clip_norm, global_norm)``, where ``global_norm``
    is the L2 norm of all of them together. ``group_name`` and ``auto_skip_clip`` are accepted for
    Paddle's API (they matter only for distributed training)."""

    def __init__(self, clip_norm: float, group_name: str = "default_group", auto_skip_clip: bool = False) -> None:
        self.clip_norm = float(clip_norm)
        self.group_name = group_name
        self.auto_skip_clip = auto_skip_clip

    def _static_clip(self, params_grads):
        squares = []
        block = None
        for param, grad in params_grads:
            if not _clippable(param, grad):
                continue
            block = grad.block
            with optimize_guard(block, param, grad):
                sq = _tmp(block, "squared_l2_norm", (1,), grad.dtype)
                block.append_op("squared_l2_norm", {"X": grad}, {"Out": sq})
            squares.append(sq)
        if not squares:
            return [(p, g) for p, g in params_grads if g is not None]
        with optimize_guard(block):
            squares = self._common_dtype(block, squares)
            dtype = squares[0].dtype
            total = _tmp(block, "add_n", (1,), dtype)
            block.append_op("sum", {"X": squares}, {"Out": total})
            norm = _tmp(block, "sqrt", (1,), dtype)
            block.append_op("sqrt", {"X": total}, {"Out": norm})
            limit = _tmp(block, "fill_constant", (1,), dtype)
            limit.stop_gradient = True
            block.append_op("fill_constant", outputs={"Out": limit},
                            attrs=fill_constant_attrs((1,), dtype, self.clip_norm))
            larger = block.create_var(unique_name.generate("elementwise_max"), (1,), dtype)
            block.append_op("elementwise_max", {"X": limit, "Y": norm}, {"Out": larger})
            factor = block.create_var(unique_name.generate("elementwise_div"), (1,), dtype)
            block.append_op("elementwise_div", {"X": limit, "Y": larger}, {"Out": factor})
        out = []
        for param, grad in _to_clip(params_grads, out):
            with optimize_guard(grad.block, param, grad):
                scale = factor
                if grad.dtype != factor.dtype:
                    scale = _cast(grad.block, factor, grad.dtype)
                grad.block.append_op("elementwise_mul", {"X": grad, "Y": scale}, {"Out": grad})
            out.append((param, grad))
        return out

    @staticmethod
    def _common_dtype(block, squares: list[Variable]) -> list[Variable]:
        """Gradients of several float dtypes: add their squared norms up in the widest one."""
        kinds = {v.dtype for v in squares}
        if len(kinds) == 1:
            return squares
        widest = "float64" if "float64" in kinds else "float32"
        return [v if v.dtype == widest else _cast(block, v, widest) for v in squares]

    def __repr__(self) -> str:
        return f"ClipGradByGlobalNorm(clip_norm={self.clip_norm})"


def _cast(block, var: Variable, dtype: str) -> Variable:
    out = _tmp(block, "cast", var.shape, dtype)
    block.append_op("cast", {"X": var}, {"Out": out},
                    {"in_dtype": dtypes.to_enum(var.dtype), "out_dtype": dtypes.to_enum(dtype)})
    return out


# -- Fluid 1.x -------------------------------------------------------------------------------------
def _need_clip(need_clip) -> Callable | None:
    if need_clip is not None and not callable(need_clip):
        raise TypeError(f"need_clip must be a function of a Parameter returning a bool, got {need_clip!r}")
    return need_clip


class GradientClipByValue(ClipGradByValue):
    """Fluid 1.x's name for :class:`ClipGradByValue`; ``need_clip(param)`` picks the parameters
    whose gradients are clipped (default: all)."""

    def __init__(self, max: float, min: float | None = None, need_clip: Callable | None = None) -> None:
        super().__init__(max, min)
        self._need_clip_func = _need_clip(need_clip)


class GradientClipByNorm(ClipGradByNorm):
    """Fluid 1.x's name for :class:`ClipGradByNorm`, with ``need_clip(param)``."""

    def __init__(self, clip_norm: float, need_clip: Callable | None = None) -> None:
        super().__init__(clip_norm)
        self._need_clip_func = _need_clip(need_clip)


class GradientClipByGlobalNorm(ClipGradByGlobalNorm):
    """Fluid 1.x's name for :class:`ClipGradByGlobalNorm`, with ``need_clip(param)``. Given per
    parameter (:func:`set_gradient_clip`), the parameters of one ``group_name`` share a norm."""

    def __init__(self, clip_norm: float, group_name: str = "default_group", need_clip: Callable | None = None) -> None:
        super().__init__(clip_norm, group_name)
        self._need_clip_func = _need_clip(need_clip)


def set_gradient_clip(clip: GradientClipBase, param_list=None, program=None) -> None:
    """Fluid 1.x: clip the gradients of ``param_list`` (Parameters or names; default: every
    parameter of ``program``, default the main program) with ``clip`` when ``minimize`` runs.

    Call it after building the network and before ``minimize``. An optimizer's own ``grad_clip``
    wins over it, as in Fluid. Each parameter gets its own copy of ``clip``; copies of one
    :class:`GradientClipByGlobalNorm` share their norm through their ``group_name``.
    """
    from ..ir.program import default_main_program
    from ..ir.variable import Parameter

    if not isinstance(clip, GradientClipBase):
        raise TypeError(f"set_gradient_clip needs a GradientClipBase (GradientClipByNorm, ...), got {clip!r}")
    program = program or default_main_program()
    block = program.global_block()
    params = block.all_parameters() if param_list is None else [
        block.var(p) if isinstance(p, str) else p for p in param_list]
    if not all(isinstance(p, Parameter) for p in params):
        raise TypeError("set_gradient_clip: param_list must hold Parameters or parameter names")
    for param in params:
        param.gradient_clip_attr = copy.deepcopy(clip)


def _clip_group_key(clip: GradientClipBase):
    if isinstance(clip, ClipGradByGlobalNorm):
        return ("global_norm", clip.group_name)
    return ("own", id(clip))


def append_gradient_clip_ops(params_grads: ParamsGrads) -> list[tuple[Variable, Variable]]:
    """Clip each gradient by its parameter's own clip (``gradient_clip_attr``, set by
    :func:`set_gradient_clip` or ``ParamAttr(gradient_clip=...)``); parameters without one keep
    their gradient. Parameters whose clips are :class:`ClipGradByGlobalNorm` with one
    ``group_name`` share one global norm (their ``clip_norm`` must agree, as in Fluid).

    Fluid 1.x clipped nothing when any parameter lacked a clip; here those parameters are simply
    left out.
    """
    pairs = [(p, g) for p, g in params_grads if g is not None]
    groups: dict = {}
    for param, grad in pairs:
        clip = getattr(param, "gradient_clip_attr", None)
        if clip is None:
            continue
        if not isinstance(clip, GradientClipBase):
            raise TypeError(f"parameter {param.name!r}: gradient_clip must be a GradientClipBase, got {clip!r}")
        key = _clip_group_key(clip)
        first, members = groups.setdefault(key, (clip, []))
        if key[0] == "global_norm" and first.clip_norm != clip.clip_norm:
            raise ValueError(f"the parameters of gradient-clip group {key[1]!r} need one clip_norm, got "
                             f"{first.clip_norm} and {clip.clip_norm}")
        members.append((param, grad))
    if not groups:
        return pairs
    clipped = {}
    for clip, members in groups.values():
        for param, grad in clip(members):
            clipped[param.name] = (param, grad)
    return [clipped.get(p.name, (p, g)) for p, g in pairs]


class ErrorClipByValue:
    """Fluid 1.x: clip the gradient of one forward variable to ``[min, max]`` (``min`` defaults to
    ``-max``) as soon as the backward pass computes it, with a ``clip`` op writing it in place.
    Set it on the variable before ``minimize``: ``var.error_clip = ErrorClipByValue(max=...)``
    (or Fluid's ``var._set_error_clip(...)``)."""

    def __init__(self, max: float, min: float | None = None) -> None:
        self.max = float(max)
        self.min = -self.max if min is None else float(min)

    def _append_clip_op(self, block, grad_name: str, index: int):
        return block.insert_op(index, "clip", {"X": grad_name}, {"Out": grad_name},
                               {"min": self.min, "max": self.max})

    def __repr__(self) -> str:
        return f"ErrorClipByValue(min={self.min}, max={self.max})"


def append_error_clip_ops(block, start: int) -> None:
    """After a backward pass appended from op ``start`` of ``block``: for each forward variable
    with an ``error_clip``, a clip op on its gradient right after the op that finishes it."""
    from ..ir.registry import grad_var_name

    targets = {grad_var_name(name): var.error_clip for name, var in block.vars.items()
               if getattr(var, "error_clip", None) is not None}
    if not targets:
        return
    for name, clip in targets.items():
        if not isinstance(clip, ErrorClipByValue):
            raise TypeError(f"{name}: error_clip must be an ErrorClipByValue, got {clip!r}")
    last_writer = {}
    for index in range(start, len(block.ops)):
        for out in block.ops[index].output_arg_names:
            if out in targets:
                last_writer[out] = index
    role = block.program._op_role
    for grad_name, index in sorted(last_writer.items(), key=lambda item: -item[1]):
        block.program._op_role = block.ops[index].attrs.get("op_role", role)
        try:
            targets[grad_name]._append_clip_op(block, grad_name, index + 1)
        finally:
            block.program._op_role = role
