"""Control-flow layers with Paddle 2.x's names: ``cond``, ``while_loop``, ``switch_case``, ``case``,
``increment`` and tensor arrays (``create_array``, ``array_write``, ``array_read``, ``array_length``).

They build the ops Paddle 2.6's static mode builds (``paddle.static.nn.cond`` and friends):
``cond`` is a ``conditional_block`` per branch (the false one under ``logical_not(pred)``), each
copying its results into variables of the enclosing block with ``assign``, then a
``select_input`` per result with ``cast(pred, int32)`` as mask; ``while_loop`` is one ``while``
op whose body ends by assigning the new loop variables and the new condition over the old
ones. ``switch_case`` and ``case``, which Paddle builds as nested ``cond`` s, are one
``conditional_block`` per branch side by side and a ``select_input`` of all their results (so
hundreds of branches build, lower and compile; Paddle runs these programs too). Programs built
here therefore run in Paddle and Paddle's run here (``tests/test_control_flow.py`` checks both
ways).

>>> x = data("x", dims=[3])
>>> y = cond(reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0)
>>> i = fill_constant([1], "int64", 0)
>>> n = fill_constant([1], "int64", 3)
>>> i, z = while_loop(lambda i, z: i < n, lambda i, z: [increment(i), z * z], [i, x], max_iterations=3)
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

from ..ir import dtypes, unique_name
from ..ir.errors import InputTypeError, ShapeError
from ..ir.variable import Variable
from .layer_helper import LayerHelper
from .math_layers import equal, logical_and, logical_not, logical_or, scale, sums
from .tensor_layers import assign, cast, fill_constant

__all__ = ["cond", "while_loop", "switch_case", "case", "increment", "is_empty", "create_array", "array_write",
           "array_read", "array_length", "While", "Switch", "IfElse"]


# -- helpers ---------------------------------------------------------------------------------------
def _flatten(structure) -> list:
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in _flatten(item)]
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in _flatten(structure[key])]
    return [structure]


def _map(fn: Callable, *structures):
    first = structures[0]
    if isinstance(first, (list, tuple)):
        for s in structures[1:]:
            if not isinstance(s, (list, tuple)) or len(s) != len(first):
                raise ValueError(f"structures differ: {first!r} and {s!r}")
        return type(first)(_map(fn, *items) for items in zip(*structures))
    if isinstance(first, dict):
        for s in structures[1:]:
            if not isinstance(s, dict) or set(s) != set(first):
                raise ValueError(f"structures differ: {first!r} and {s!r}")
        return {k: _map(fn, *(s[k] for s in structures)) for k in first}
    return fn(*structures)


def _numel(var: Variable) -> int:
    n = 1
    for d in var.shape:
        n *= d
    return n


def _check_condition(pred, what: str, layer: str) -> None:
    """A condition must be a one-element bool Variable (an :class:`InputTypeError`, also a ``TypeError``)."""
    if not isinstance(pred, Variable):
        raise InputTypeError(f"{layer}: {what} must be a bool Variable, got {type(pred).__name__}")
    if pred.dtype != "bool":
        raise InputTypeError(f"{layer}: {what} must be a bool Variable, got dtype {pred.dtype}")
    if _numel(pred) != 1:
        raise InputTypeError(f"{layer}: {what} must hold one value (shape [1] or []), got shape {list(pred.shape)}")


def _block_io(block) -> tuple[list[str], list[str]]:
    """Paddle's ``get_inputs_outputs_in_block``: names the block's ops read before writing them,
    and every name they write (in program order, where Paddle uses sets)."""
    inputs: list[str] = []
    outputs: list[str] = []
    written: set[str] = set()
    for op in block.ops:
        for n in op.input_arg_names:
            if n not in written and n not in inputs:
                inputs.append(n)
        for n in op.output_arg_names:
            if n not in written:
                written.add(n)
                outputs.append(n)
    parent = block.program.block(block.parent_idx)
    # Arrays created in this block are not inputs from outside (Paddle's step 2).
    inputs = [n for n in inputs if not (parent.find_var(n) is None and block.has_var(n)
                                        and block.vars[n].type == dtypes.LOD_TENSOR_ARRAY)]
    return inputs, outputs


def _step_scopes(block) -> Variable:
    return block.create_var(unique_name.generate("_generated_var"), (), None, type=dtypes.STEP_SCOPES)


def _copy_to_parent(var, program):
    """A result of a branch, copied into a new variable of the enclosing block (Paddle's
    ``copy_var_to_parent_block``); arrays of an enclosing block are passed as they are."""
    if not isinstance(var, Variable):
        return var
    parent = program.block(program.current_block().parent_idx)
    if var.type == dtypes.LOD_TENSOR_ARRAY and parent.find_var(var.name) is not None:
        return var
    out = parent.create_var(unique_name.generate("_generated_var"), var.shape, var.dtype, var.lod_level,
                            type=var.type)
    assign(var, out)
    return out


def _append_conditional_block(inside, conds: list[Variable], is_scalar_condition: bool) -> None:
    """Paddle's ``ConditionalBlock.complete``: the ``conditional_block`` op of sub-block ``inside``."""
    parent = inside.program.block(inside.parent_idx)
    reads, writes = _block_io(inside)
    inputs = [parent.var(n) for n in reads if parent.find_var(n) is not None]
    outs = [parent.var(n) for n in writes if parent.find_var(n) is not None]
    parent.append_op("conditional_block", {"Cond": conds, "Input": inputs},
                     {"Out": outs, "Scope": [_step_scopes(parent)]},
                     {"sub_block": inside.idx, "is_scalar_condition": is_scalar_condition})


def _conditional_block(conds: list[Variable], fn: Callable, is_scalar_condition: bool = True):
    """Run ``fn`` into a new sub-block, append its ``conditional_block`` op; return ``fn``'s
    results copied into the enclosing block."""
    program = LayerHelper("conditional_block").main_program
    inside = program.create_block()
    try:
        result = fn()
        copied = None if result is None else _map(partial(_copy_to_parent, program=program), result)
    finally:
        program.rollback()
    _append_conditional_block(inside, conds, is_scalar_condition)
    return copied


def _append_while(inside, cond: Variable, is_test: bool, max_iterations: int | None) -> None:
    """Paddle's ``While._complete``: the ``while`` op of body block ``inside``."""
    parent = inside.program.block(inside.parent_idx)
    reads, writes = _block_io(inside)
    out_names = [n for n in dict.fromkeys([cond.name] + writes) if parent.find_var(n) is not None]
    x_names = [n for n in dict.fromkeys(reads + out_names) if n != cond.name and parent.find_var(n) is not None]
    attrs: dict[str, Any] = {"sub_block": inside.idx, "is_test": bool(is_test)}
    if max_iterations is not None:
        attrs["max_iterations"] = int(max_iterations)
    parent.append_op("while", {"X": [parent.var(n) for n in x_names], "Condition": [cond]},
                     {"Out": [parent.var(n) for n in out_names], "StepScopes": [_step_scopes(parent)]}, attrs)


def _check_bound(max_iterations) -> None:
    if max_iterations is not None and (isinstance(max_iterations, bool) or int(max_iterations) <= 0):
        raise ValueError(f"max_iterations must be a positive int, got {max_iterations!r}")


def _select_input(inputs: list[Variable], mask: Variable) -> Variable:
    helper = LayerHelper("select_input")
    last = inputs[-1]
    if all(len(v.shape) == len(last.shape) for v in inputs):
        shape = [d if all(v.shape[i] == d for v in inputs) else -1 for i, d in enumerate(last.shape)]
    else:
        shape = list(last.shape)
    out = helper.block.create_var(unique_name.generate("_generated_var"), shape, last.dtype,
                                  last.lod_level, type=last.type)
    helper.append_op("select_input", {"X": inputs, "Mask": mask}, {"Out": out})
    return out


# -- cond ------------------------------------------------------------------------------------------
def cond(pred: Variable, true_fn: Callable | None = None, false_fn: Callable | None = None,
         name: str | None = None):
    """``true_fn()`` if ``pred`` (a one-element bool Variable) holds at run time, else ``false_fn()``.

    Both functions build their ops into sub-blocks and must return the same structure of
    Variables (or both None); each returned pair must have one shape and dtype at run time
    (XLA selects between them). Ops built outside the functions run whichever branch is taken.
    Only the taken branch runs (``lax.cond``), and gradients flow through it alone.

    >>> # y = cond(x.sum() > 0, lambda: x * 2.0, lambda: x - 1.0)
    """
    _check_condition(pred, "pred", "cond")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"cond: name must be a str, got {type(name).__name__}")
    true_output = false_output = None
    if true_fn is not None:
        if not callable(true_fn):
            raise TypeError(f"The true_fn in cond must be callable, but received {type(true_fn).__name__}")
        true_output = _conditional_block([pred], true_fn)
    if false_fn is not None:
        if not callable(false_fn):
            raise TypeError(f"The false_fn in cond must be callable, but received {type(false_fn).__name__}")
        false_output = _conditional_block([logical_not(pred)], false_fn)
    if true_output is None and false_output is None:
        return None
    if true_output is None or false_output is None:
        given, missing = ("false_fn", "true_fn") if true_output is None else ("true_fn", "false_fn")
        raise _branch_mismatch(f"{missing} returns None while {given} returns results; both must return the same "
                               "structure of Variables, or both None", true_fn, false_fn)
    n_true, n_false = len(_as_sequence(true_output)), len(_as_sequence(false_output))
    if n_true != n_false:
        raise _branch_mismatch(f"true_fn returns {n_true} output(s), but false_fn returns {n_false}; both must "
                               "return the same number (XLA selects between them output by output)",
                               true_fn, false_fn)
    _check_same_dtypes(true_output, false_output)
    mask = cast(pred, "int32")

    def merge(false_var, true_var):
        if not isinstance(false_var, Variable) or not isinstance(true_var, Variable):
            if false_var == true_var:
                return false_var
            raise TypeError(f"cond: both branches must return Variables here, got {false_var!r} and {true_var!r}")
        return _select_input([false_var, true_var], mask)

    try:
        return _map(merge, false_output, true_output)
    except ValueError as exc:
        raise _branch_mismatch(str(exc), true_fn, false_fn) from None


def _source_of(fn: Callable) -> str:
    """Where ``fn`` is defined (``file:line``), for messages about a branch."""
    target = getattr(fn, "func", fn)                  # a functools.partial: its function
    code = getattr(target, "__code__", None) or getattr(getattr(target, "__call__", None), "__code__", None)
    if code is None:
        return repr(fn)
    return f"{code.co_filename}:{code.co_firstlineno}"


def _branch_mismatch(what: str, true_fn: Callable, false_fn: Callable) -> InputTypeError:
    """The error for branches of ``cond`` whose results do not pair up (an :class:`InputTypeError`,
    also a ``ValueError`` and a ``TypeError``), naming both branches' source lines."""
    return InputTypeError(f"Incompatible return values of true_fn and false_fn in cond: {what}. true_fn is "
                          f"defined at {_source_of(true_fn)}, false_fn at {_source_of(false_fn)}")


def _check_same_dtypes(true_output, false_output) -> None:
    """Both branches' results, output by output, must have one dtype (XLA selects between them):
    an :class:`InputTypeError` listing each differing output with both dtypes and shapes."""
    flat_true, flat_false = _flatten(true_output), _flatten(false_output)
    if len(flat_true) != len(flat_false):
        return                                     # a structure mismatch: _map says so
    differ = [f"output {i}: true_fn gives {t.dtype} {list(t.shape)} ({t.name!r}), false_fn gives "
              f"{f.dtype} {list(f.shape)} ({f.name!r})"
              for i, (t, f) in enumerate(zip(flat_true, flat_false))
              if isinstance(t, Variable) and isinstance(f, Variable) and t.dtype and f.dtype and t.dtype != f.dtype]
    if differ:
        raise InputTypeError("Incompatible return values of true_fn and false_fn in cond: the branches return "
                             "different dtypes (XLA selects between them, so each output needs one dtype; "
                             "cast one branch): " + "; ".join(differ))


def _as_sequence(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


# -- while_loop ------------------------------------------------------------------------------------
def _compatible(a: Sequence[int], b: Sequence[int]) -> bool:
    return len(a) == len(b) and all(x == y or x < 0 or y < 0 for x, y in zip(a, b))


def while_loop(cond: Callable, body: Callable, loop_vars: Sequence, is_test: bool = False,
               name: str | None = None, max_iterations: int | None = None):
    """Repeat ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)`` holds; return the final
    loop variables (the same Variables, updated in place, as Paddle does).

    ``body`` returns as many Variables as ``loop_vars``, each of the shape and dtype it had (an
    XLA loop carries one shape; a mismatch is a :class:`ShapeError` naming the variable).
    ``max_iterations`` (fluidjax's, stored as an extra ``while`` attribute that Paddle ignores)
    bounds the trip count for the gradient: with it, backward runs a ``lax.scan`` of that many
    steps (linear time, memory per step); without it, backward recomputes (no memory per step,
    time quadratic in the trip count). A loop that runs past the bound gets NaN gradients.
    See ``docs/control_flow.md``.

    >>> # i, z = while_loop(lambda i, z: i < n, lambda i, z: [i + 1, z * z], [i, z])
    """
    if not callable(cond):
        raise TypeError("cond in while_loop should be callable")
    if not callable(body):
        raise TypeError("body in while_loop should be callable")
    if not isinstance(loop_vars, (list, tuple)):
        raise TypeError(f"loop_vars in while_loop must be a list or tuple, got {type(loop_vars).__name__}")
    if len(loop_vars) == 0:
        raise ValueError("loop_vars in while_loop should not be empty")
    _check_bound(max_iterations)
    pre_cond = cond(*loop_vars)
    _check_condition(pre_cond, "the value cond returns", "while_loop")
    helper = LayerHelper("while", name)
    program = helper.main_program
    inside = program.create_block()
    try:
        output_vars = body(*loop_vars)
        if not isinstance(output_vars, (list, tuple)):
            output_vars = [output_vars]
        if len(output_vars) != len(loop_vars):
            raise ValueError("body in while_loop should return the same arity (length and structure) and types "
                             f"as loop_vars: {len(output_vars)} values for {len(loop_vars)} loop variables")
        for new, old in zip(_flatten(list(output_vars)), _flatten(list(loop_vars))):
            if isinstance(new, Variable) and isinstance(old, Variable) and old.type != dtypes.LOD_TENSOR_ARRAY \
                    and not _compatible(new.shape, old.shape):
                raise ShapeError(f"while_loop: loop variable {old.name!r} has shape {list(old.shape)} before the "
                                 f"loop but the body returns shape {list(new.shape)} ({new.name!r}); an XLA loop "
                                 "carries one shape")
        now_cond = cond(*output_vars)
        _check_condition(now_cond, "the value cond returns", "while_loop")
        for new, old in zip(_flatten(list(output_vars)), _flatten(list(loop_vars))):
            if not isinstance(new, Variable) or not isinstance(old, Variable):
                raise TypeError("while_loop: loop_vars and what body returns must be Variables")
            if new.type == dtypes.LOD_TENSOR_ARRAY:
                if program.block(inside.parent_idx).find_var(new.name) is None:
                    assign(new, old)
            else:
                assign(new, old)
        assign(now_cond, pre_cond)
    finally:
        program.rollback()
    _append_while(inside, pre_cond, is_test, max_iterations)
    return loop_vars


# -- case, switch_case -----------------------------------------------------------------------------
def _flat_branches(conds: list[Variable], fns: list[Callable], default: Callable, layer: str):
    """``fns[k]()`` where ``conds[k]`` holds (at most one does), else ``default()``: one
    ``conditional_block`` per branch, all in the enclosing block, and one ``select_input`` per
    result with the taken branch's position as mask (``sum_k k * cond_k``, ``len(fns)`` for the
    default). Paddle's ``switch_case`` and ``case`` nest a ``cond`` per branch instead: a chain of
    depth N, which lowers to N nested ``lax.cond`` s (Python recursion past ~75 branches, and
    compile time quadratic in N); this program has the same result, runs in Paddle as well, and
    lowers to N side-by-side conds."""
    as_int = [cast(c, "int32") for c in conds]
    none = equal(sums(as_int), fill_constant([1], "int32", 0))
    mask = sums([scale(v, float(k)) for k, v in enumerate(as_int) if k] + [scale(cast(none, "int32"), float(len(fns)))])
    results = [_conditional_block([c], fn) for c, fn in zip(conds, fns)] + [_conditional_block([none], default)]
    if all(r is None for r in results):
        return None
    if any(r is None for r in results):
        which = [k for k, r in enumerate(results) if r is None]
        raise ValueError(f"{layer}: every branch must return results, or none may; branch(es) {which} return None "
                         f"(the default is branch {len(fns)})")
    flat = [_flatten(r) for r in results]
    for k, outs in enumerate(flat[1:], 1):
        differ = [f"output {i}: {a.dtype} {list(a.shape)} ({a.name!r}) against {b.dtype} {list(b.shape)} "
                  f"({b.name!r}) of branch 0" for i, (a, b) in enumerate(zip(outs, flat[0]))
                  if isinstance(a, Variable) and isinstance(b, Variable) and a.dtype and b.dtype and a.dtype != b.dtype]
        if differ:
            raise InputTypeError(f"{layer}: branch {k} returns other dtypes than branch 0 (XLA selects between them, "
                                 "so each output needs one dtype; cast one branch): " + "; ".join(differ))

    def merge(*outs):
        if not all(isinstance(v, Variable) for v in outs):
            if all(v == outs[0] for v in outs):
                return outs[0]
            raise TypeError(f"{layer}: every branch must return Variables here, got {list(outs)!r}")
        return _select_input(list(outs), mask)

    try:
        return _map(merge, *results)
    except ValueError as exc:
        raise ValueError(f"Incompatible return values of the branches of {layer}: {exc}") from None


def case(pred_fn_pairs: Sequence, default: Callable | None = None, name: str | None = None):
    """An if-elif-else chain: the ``fn`` of the first ``(pred, fn)`` pair whose ``pred`` holds, else
    ``default()`` (without one, the last pair's ``fn``). One ``conditional_block`` per pair, side
    by side, each under ``pred_k and not any earlier pred`` (see :func:`_flat_branches`)."""
    if not isinstance(pred_fn_pairs, (list, tuple)):
        raise TypeError(f"case: pred_fn_pairs must be a list or tuple, got {type(pred_fn_pairs).__name__}")
    for pair in pred_fn_pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"case: each element of pred_fn_pairs must be a (pred, fn) tuple, got {pair!r}")
        pred, fn = pair
        if not isinstance(pred, Variable):
            raise TypeError(f"case: a pred must be a bool Variable, got {type(pred).__name__}")
        if not callable(fn):
            raise TypeError(f"The fn for {pred.name} of pred_fn_pairs in Op(case) must be callable.")
    pairs = list(pred_fn_pairs)
    if default is None:
        if not pairs:
            raise ValueError("case: pred_fn_pairs is empty and there is no default")
        default = pairs[-1][1]
        pairs = pairs[:-1]
    elif not callable(default):
        raise TypeError("The default in Op(case) must be callable.")
    conds, taken = [], None
    for pred, _ in pairs:
        _check_condition(pred, "a pred", "case")
        conds.append(pred if taken is None else logical_and(pred, logical_not(taken)))
        taken = pred if taken is None else logical_or(taken, pred)
    if not pairs:
        return default()
    return _flat_branches(conds, [fn for _, fn in pairs], default, "case")


def switch_case(branch_index: Variable, branch_fns, default: Callable | None = None, name: str | None = None):
    """The ``fn`` whose key equals ``branch_index`` (an int Variable of one element); ``branch_fns``
    is a dict key -> fn, a list of (key, fn) pairs or a list of fns (keys 0, 1, ...). No key
    matches: ``default()``, or without one the fn of the largest key. One ``conditional_block``
    per key, side by side (see :func:`_flat_branches`): hundreds of branches build and run."""
    if not isinstance(branch_index, Variable) or branch_index.dtype not in ("uint8", "int32", "int64"):
        raise TypeError("switch_case: branch_index must be a uint8, int32 or int64 Variable")
    if branch_index.dtype != "int64":
        branch_index = cast(branch_index, "int64")
    if not isinstance(branch_fns, (list, tuple, dict)):
        raise TypeError(f"switch_case: branch_fns must be a dict, list or tuple, got {type(branch_fns).__name__}")
    fns = list(branch_fns.items()) if isinstance(branch_fns, dict) else list(branch_fns)
    if fns and all(callable(fn) for fn in fns):
        fns = list(enumerate(fns))
    keys = []
    for pair in fns:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"switch_case: each element of branch_fns must be a (key, fn) tuple, got {pair!r}")
        key, fn = pair
        if not isinstance(key, int):
            raise TypeError(f"switch_case: a key must be an int, got {type(key).__name__}")
        if key in keys:
            raise ValueError(f"The key in 'branch_fns' must be unique, but '{key}' appears more than once.")
        keys.append(key)
        if not callable(fn):
            raise TypeError(f"switch_case: the function for key {key} must be callable")
    if default is None:
        ordered = sorted(fns, key=lambda p: p[0])
        default = ordered[-1][1]
        fns = ordered[:-1]
    elif not callable(default):
        raise TypeError("The default in Op(case) must be callable.")
    conds = [equal(branch_index, fill_constant([1], "int64", index)) for index, _ in fns]
    if not fns:
        return default()
    return _flat_branches(conds, [fn for _, fn in fns], default, "switch_case")


# -- increment -------------------------------------------------------------------------------------
def increment(x: Variable, value: float = 1.0, in_place: bool = True) -> Variable:
    """``x + value`` for a one-element ``x`` (a loop counter); written into ``x`` itself when
    ``in_place`` (Paddle's default), so a loop body can count with it."""
    helper = LayerHelper("increment")
    out = x if in_place else helper.create_tmp(x.dtype, stop_gradient=True)
    helper.append_op("increment", {"X": x}, {"Out": out}, {"step": float(value)})
    return out


def is_empty(x: Variable, cond: Variable | None = None, name: str | None = None) -> Variable:
    """Whether ``x`` has no elements (a bool scalar); written into ``cond`` when given. Of a
    value whose row count is data (``beam_search``'s selected ids) it reads the real count, so a
    ``While`` decoder stops when every beam has ended."""
    helper = LayerHelper("is_empty", name)
    out = cond if cond is not None else helper.create_tmp("bool", stop_gradient=True)
    helper.append_op("is_empty", {"X": x}, {"Out": out})
    return out


# -- tensor arrays ---------------------------------------------------------------------------------
def create_array(dtype, initialized_list: Sequence[Variable] | None = None) -> Variable:
    """An empty tensor array (a ``LOD_TENSOR_ARRAY`` variable); ``initialized_list`` writes its
    first elements."""
    helper = LayerHelper("array")
    array = helper.block.create_var(unique_name.generate("array.out"), (), dtypes.normalize(dtype), 0,
                                    type=dtypes.LOD_TENSOR_ARRAY)
    for i, item in enumerate(initialized_list or ()):
        array_write(item, fill_constant([1], "int64", i), array)
    return array


def array_write(x: Variable, i: Variable, array: Variable | None = None) -> Variable:
    """Write ``x`` at position ``i`` (an int64 Variable of one element) of ``array`` (a new array
    when None); return the array."""
    helper = LayerHelper("array_write")
    if array is None:
        array = create_array(x.dtype)
    helper.append_op("write_to_array", {"X": x, "I": i}, {"Out": array})
    return array


def array_read(array: Variable, i: Variable) -> Variable:
    """The element at position ``i`` of ``array``."""
    helper = LayerHelper("array_read")
    out = helper.create_tmp(array.dtype)
    helper.append_op("read_from_array", {"X": array, "I": i}, {"Out": out})
    return out


def array_length(array: Variable) -> Variable:
    """The number of elements of ``array``, an int64 Variable of shape [1]."""
    helper = LayerHelper("array_length")
    out = helper.create_tmp("int64", stop_gradient=True)
    helper.append_op("lod_array_length", {"X": array}, {"Out": out})
    return out


# -- Fluid 1.x style: While, Switch ----------------------------------------------------------------
class _BlockGuard:
    """``with``: a new sub-block is current inside; on a clean exit ``complete(block)`` appends
    the op that owns it. On an exception the block is left (the program keeps an unused block)."""

    def __init__(self, complete: Callable) -> None:
        self._complete = complete
        self._program = None

    def __enter__(self):
        self._program = LayerHelper("block").main_program
        self._block = self._program.create_block()
        return self._block

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._program.rollback()
        if exc_type is None:
            self._complete(self._block)
        return False


class While:
    """Paddle 1.x's loop: ``with loop.block():`` builds the body, which must update ``cond``
    (e.g. ``layer.assign(layer.less_than(i, n), cond)``); variables of enclosing blocks it
    writes are the loop's state. ``max_iterations`` as in :func:`while_loop`.

    >>> # cond = layer.less_than(i, n); loop = layer.While(cond)
    >>> # with loop.block():
    >>> #     layer.increment(i); layer.assign(layer.less_than(i, n), cond)
    """

    def __init__(self, cond: Variable, is_test: bool = False, name: str | None = None,
                 max_iterations: int | None = None) -> None:
        _check_condition(cond, "cond", "While")
        _check_bound(max_iterations)
        self.cond_var, self.is_test, self.max_iterations = cond, is_test, max_iterations

    def block(self) -> _BlockGuard:
        """The body: a ``with`` block."""
        return _BlockGuard(lambda inside: _append_while(inside, self.cond_var, self.is_test, self.max_iterations))


class Switch:
    """Paddle 1.x's switch: ``with Switch() as s:``, then ``with s.case(cond):`` blocks (the first
    whose condition holds runs) and an optional ``with s.default():``; the blocks assign to
    variables of the enclosing block."""

    def __init__(self, name: str | None = None) -> None:
        self.inside_scope = False
        self.pre_not_conditions: list[Variable] = []

    def case(self, condition: Variable) -> _BlockGuard:
        """A block that runs when ``condition`` holds and no earlier case's did."""
        if not self.inside_scope:
            raise ValueError("case should be called inside with")
        _check_condition(condition, "condition", "Switch.case")
        if not self.pre_not_conditions:
            cond = condition
            self.pre_not_conditions.append(logical_not(condition))
        else:
            previous = self.pre_not_conditions[-1]
            self.pre_not_conditions.append(logical_and(previous, logical_not(condition)))
            cond = logical_and(previous, condition)
        return _BlockGuard(lambda inside: _append_conditional_block(inside, [cond], True))

    def default(self) -> _BlockGuard:
        """A block that runs when no case's condition held."""
        if not self.pre_not_conditions:
            raise ValueError("there should be at least one condition")
        cond = self.pre_not_conditions[-1]
        return _BlockGuard(lambda inside: _append_conditional_block(inside, [cond], True))

    def __enter__(self) -> "Switch":
        self.inside_scope = True
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.inside_scope = False
        return False


class IfElse:
    """Fluid 1.x's row-splitting conditional. ``cond`` is a bool [N, 1]; inside
    ``with ie.true_block():`` ``ie.input(x)`` is the rows of ``x`` where ``cond`` holds (in
    ``false_block``, where it does not), and ``ie.output(*vars)`` names the branch's results;
    ``ie()`` merges each true/false pair back into N rows (``merge_lod_tensor``).

    Fluid ran each branch in a ``conditional_block`` that runs whenever ``cond`` has elements, that
    is always; here the branches' ops go into the enclosing block, between the
    ``split_lod_tensor`` that makes their inputs and the ``merge_lod_tensor`` that joins their
    outputs, which computes the same values (a branch with no rows computes on none).
    """

    OUT_IF_ELSE_BLOCKS, IN_IF_ELSE_TRUE_BLOCKS, IN_IF_ELSE_FALSE_BLOCKS = 0, 1, 2

    def __init__(self, cond: Variable, name: str | None = None):
        if not isinstance(cond, Variable):
            raise TypeError("IfElse: cond must be a Variable")
        if name is not None and not isinstance(name, str):
            raise TypeError("IfElse: name must be a str or None")
        self.helper = LayerHelper("ifelse", name)
        self.cond = cond
        self.input_table: dict[int, tuple[Variable, Variable]] = {}
        self.status = IfElse.OUT_IF_ELSE_BLOCKS
        self.output_table: tuple[list, list] = ([], [])      # (false outputs, true outputs), as Fluid's

    def input(self, x: Variable) -> Variable:
        """This branch's rows of ``x`` (one ``split_lod_tensor`` per input, shared by both branches)."""
        if self.status == IfElse.OUT_IF_ELSE_BLOCKS:
            raise ValueError("IfElse.input must be called inside true_block() or false_block()")
        if id(x) not in self.input_table:
            block = self.helper.block
            pair = tuple(block.create_var(unique_name.generate(f"ifelse_input{self.helper.name}"), (), x.dtype)
                         for _ in range(2))
            self.helper.append_op("split_lod_tensor", {"X": x, "Mask": self.cond},
                                  {"OutTrue": pair[0], "OutFalse": pair[1]}, {"level": 0})
            self.input_table[id(x)] = pair
        out_true, out_false = self.input_table[id(x)]
        return out_true if self.status == IfElse.IN_IF_ELSE_TRUE_BLOCKS else out_false

    def _guard(self, is_true: bool):
        ie = self

        class _Guard:
            def __enter__(self):
                if ie.status != IfElse.OUT_IF_ELSE_BLOCKS:
                    raise ValueError("IfElse: blocks cannot nest")
                ie.status = IfElse.IN_IF_ELSE_TRUE_BLOCKS if is_true else IfElse.IN_IF_ELSE_FALSE_BLOCKS
                return ie

            def __exit__(self, *exc):
                ie.status = IfElse.OUT_IF_ELSE_BLOCKS
                return False

        return _Guard()

    def true_block(self):
        """``with ie.true_block():`` the branch of the rows where ``cond`` holds."""
        return self._guard(True)

    def false_block(self):
        """``with ie.false_block():`` the branch of the other rows."""
        return self._guard(False)

    def output(self, *outs: Variable) -> None:
        """The branch's results, in the order ``ie()`` pairs them with the other branch's."""
        if self.status == IfElse.OUT_IF_ELSE_BLOCKS:
            raise ValueError("IfElse.output can only be called inside true_block() or false_block()")
        table = self.output_table[1 if self.status == IfElse.IN_IF_ELSE_TRUE_BLOCKS else 0]
        for each in outs:
            if not isinstance(each, Variable):
                raise TypeError("IfElse.output takes Variables")
            outside = self.helper.block.create_var(unique_name.generate(f"{self.helper.name}_output"), (),
                                                   each.dtype)
            table.append(assign(each, outside))

    def __call__(self) -> list:
        """The merged outputs: one variable of N rows per output pair."""
        if self.status != IfElse.OUT_IF_ELSE_BLOCKS:
            raise ValueError("IfElse() must be called outside its blocks")
        false_len, true_len = map(len, self.output_table)
        if false_len == 0 and true_len == 0:
            raise ValueError("IfElse: call true_block() / false_block() (with outputs) before IfElse()")
        if false_len != true_len and false_len and true_len:
            raise ValueError("IfElse: both branches must give the same number of outputs")
        if not false_len or not true_len:
            return self.output_table[0 if false_len else 1]
        merged = []
        for false_var, true_var in zip(*self.output_table):
            out = self.helper.create_tmp(true_var.dtype)
            self.helper.append_op("merge_lod_tensor", {"X": self.cond, "Mask": self.cond, "InTrue": true_var,
                                                       "InFalse": false_var}, {"Out": out}, {"level": 0})
            merged.append(out)
        return merged
