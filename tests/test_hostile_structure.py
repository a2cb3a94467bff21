"""Hostile use of the in-memory IR and the layer API (issue 13): broken block trees, typed errors,
bad declared dims, in-place edits behind the Executor's back, symbolic comparisons and NumPy
operands, and layer calls that fail half-way."""

import copy
import threading

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir import registry
from fluidjax.ir.program import Operator
from fluidjax.ir.variable import Variable


def _returns_within(fn, seconds=10.0):
    """Run ``fn`` in a thread; its exception (or a hang) comes back here instead of a stuck test."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call did not return (an endless walk of the block tree?)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _program_with_blocks(n):
    prog = fj.Program()
    prog.global_block().create_var("g", (2,), "float32")
    for _ in range(n):
        prog.create_block(0)
        prog.rollback()
    return prog


# -- 1. the block tree at the API level ---------------------------------------------------------
@pytest.mark.parametrize("parents", [{1: 2, 2: 1}, {1: 1}, {1: 3, 2: 1, 3: 2}], ids=["two", "self", "three"])
def test_a_cycle_of_parents_is_a_format_error_not_an_endless_walk(parents):
    prog = _program_with_blocks(3)
    prog.block(1).create_var("local", (1,), "float32")
    for idx, parent in parents.items():
        prog.block(idx).parent_idx = parent
    block = prog.block(1)
    with pytest.raises(fj.ProgramFormatError, match=r"parents of block 1 form a cycle: 1 -> "):
        _returns_within(lambda: block.var("missing"))
    with pytest.raises(fj.ProgramFormatError):
        _returns_within(lambda: block.find_var("missing"))
    assert block.var("local").name == "local"  # a local hit never walks


@pytest.mark.parametrize("parent", [7, -3, "0"])
def test_a_parent_out_of_range_is_a_format_error_naming_the_block(parent):
    prog = _program_with_blocks(2)
    prog.block(2).parent_idx = parent
    with pytest.raises(fj.ProgramFormatError, match=rf"block 2 has parent_idx {parent!r}"):
        prog.block(2).var("g")
    with pytest.raises(fj.ProgramFormatError, match="block 2"):
        prog.block(2).find_var("g")
    with pytest.raises(fj.ProgramFormatError, match="block 2"):
        prog.block(2).parent  # noqa: B018


def test_a_sound_tree_still_finds_variables_in_parents():
    prog = _program_with_blocks(1)
    inner = prog.create_block(1)
    assert inner.var("g") is prog.global_block().vars["g"]
    assert inner.find_var("nope") is None


@pytest.mark.parametrize("parent", [3, 99, -2, 1.5, "1"])
def test_create_block_refuses_a_parent_out_of_range(parent):
    prog = _program_with_blocks(2)
    before = (prog.num_blocks, prog._version, prog.current_block().idx)
    with pytest.raises(fj.ProgramFormatError, match="parent_idx"):
        prog.create_block(parent)
    assert (prog.num_blocks, prog._version, prog.current_block().idx) == before
    assert prog.create_block(-1).parent_idx == -1 and prog.create_block(2).parent_idx == 2


# -- 2. typed errors ---------------------------------------------------------------------------
def test_a_missing_variable_is_a_VariableNotFoundError_that_prints_plainly():
    block = fj.Program().global_block()
    with pytest.raises(fj.VariableNotFoundError) as info:
        block.var("ghost")
    assert isinstance(info.value, KeyError) and isinstance(info.value, fj.FluidJaxError)
    assert str(info.value) == "variable 'ghost' is not in block 0 or its parents"


def test_an_op_reading_a_missing_variable_is_a_VariableNotFoundError():
    block = fj.Program().global_block()
    block.create_var("out", (2,), "float32")
    with pytest.raises(fj.VariableNotFoundError, match=r"op 'relu' input 'X': variable 'ghost' is not in "
                                                       r"block 0; create it first") as info:
        block.append_op("relu", {"X": "ghost"}, {"Out": "out"})
    assert isinstance(info.value, KeyError) and not str(info.value).startswith('"')
    assert block.ops == []


def test_an_unregistered_op_type_is_an_UnregisteredOpError():
    with pytest.raises(fj.UnregisteredOpError, match=r"op type 'no_such_op' is not registered") as info:
        registry.get("no_such_op")
    assert isinstance(info.value, KeyError) and isinstance(info.value, fj.FluidJaxError)
    assert str(info.value).startswith("op type 'no_such_op'")
    block = fj.Program().global_block()
    with pytest.raises(fj.UnregisteredOpError):
        block.append_op("no_such_op")
    with pytest.raises(KeyError):
        registry.get(["unhashable"])


# -- 3. declared dims --------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(-7,), (3, -2), (-1, -100)])
def test_a_negative_dim_other_than_minus_one_is_refused_naming_the_variable(shape):
    block = fj.Program().global_block()
    with pytest.raises(fj.ShapeError, match=r"variable 'bad'.*-1 for unknown") as info:
        block.create_var("bad", shape, "float32")
    assert isinstance(info.value, ValueError)
    assert "bad" not in block.vars
    with pytest.raises(ValueError):
        block.create_parameter("badp", shape, "float32")


def test_setting_a_bad_shape_on_a_variable_is_refused_and_leaves_it_alone():
    v = fj.Program().global_block().create_var("v", (-1, 3), "float32")
    with pytest.raises(fj.ShapeError, match="variable 'v'"):
        v.shape = (-7, 3)
    assert v.shape == (-1, 3)
    v.shape = [2, 3]   # a list is stored as a tuple
    assert v.shape == (2, 3)


# -- 4. in-place edits never run a stale compiled step -------------------------------------------
def _chain():
    """x -> a = 2x, b = 3x, out = 1·a, out = 10·out: out is 20x."""
    # fluid.data (need_check_feed): its feeds are checked against its declaration, which the tests
    # edit (layer.data's declaration is advice, as Fluid's layers.data: tests/test_fluid1_feed_rules.py)
    x = fj.data("x", [-1, 3])
    a = layer.scale(x, 2.0)
    b = layer.scale(x, 3.0)
    out = layer.scale(a, 1.0)
    block = fj.default_main_program().global_block()
    block.append_op("scale", {"X": out}, {"Out": out}, {"scale": 10.0})
    return block, x, a, b, out


def _scale_op(block, src, dst, factor):
    """A detached ``scale`` op (made like append_op makes it, not yet in the block)."""
    return block._make_op("scale", {"X": src}, {"Out": dst}, {"scale": factor})


def _mutations():
    def ops_of(block):
        return block.ops

    return {
        "attrs[k] = v": (lambda blk, x, a, b, out: blk.ops[2].attrs.__setitem__("scale", 5.0), 100.0),
        "attrs.update": (lambda blk, x, a, b, out: blk.ops[0].attrs.update(scale=4.0), 40.0),
        "attrs.setdefault+pop": (lambda blk, x, a, b, out: blk.ops[3].attrs.pop("scale"), 2.0),
        "op.attrs = {...}": (lambda blk, x, a, b, out: setattr(blk.ops[2], "attrs", {**blk.ops[2].attrs, "scale": 7.0}),
                             140.0),
        "set_attr": (lambda blk, x, a, b, out: blk.ops[3].set_attr("scale", 0.5), 1.0),
        "op.type = ...": (lambda blk, x, a, b, out: setattr(blk.ops[3], "type", "relu"), 2.0),
        "inputs[slot][i] = n": (lambda blk, x, a, b, out: blk.ops[2].inputs["X"].__setitem__(0, b.name), 30.0),
        "inputs[slot] = [...]": (lambda blk, x, a, b, out: blk.ops[2].inputs.__setitem__("X", [b.name]), 30.0),
        "inputs[slot].clear/append": (lambda blk, x, a, b, out: (blk.ops[2].inputs["X"].clear(),
                                                                 blk.ops[2].inputs["X"].append(b.name)), 30.0),
        "inputs[slot][:] = ...": (lambda blk, x, a, b, out: blk.ops[2].inputs["X"].__setitem__(slice(None), [b.name]),
                                  30.0),
        "op.inputs = {...}": (lambda blk, x, a, b, out: setattr(blk.ops[2], "inputs", {"X": [b.name]}), 30.0),
        "outputs[slot][i] = n": (lambda blk, x, a, b, out: blk.ops[1].outputs["Out"].__setitem__(0, a.name), 30.0),
        "outputs.update": (lambda blk, x, a, b, out: blk.ops[1].outputs.update({"Out": [a.name]}), 30.0),
        "del ops[i]": (lambda blk, x, a, b, out: blk.ops.__delitem__(3), 2.0),
        "ops.pop()": (lambda blk, x, a, b, out: blk.ops.pop(), 2.0),
        "ops.remove(op)": (lambda blk, x, a, b, out: blk.ops.remove(blk.ops[3]), 2.0),
        "remove_op": (lambda blk, x, a, b, out: blk.remove_op(3), 2.0),
        "ops[i] = op": (lambda blk, x, a, b, out: blk.ops.__setitem__(3, _scale_op(blk, out, out, 100.0)), 200.0),
        "ops[:] = ops[:3]": (lambda blk, x, a, b, out: blk.ops.__setitem__(slice(None), blk.ops[:3]), 2.0),
        "del ops[3:]": (lambda blk, x, a, b, out: blk.ops.__delitem__(slice(3, None)), 2.0),
        "ops.append": (lambda blk, x, a, b, out: blk.ops.append(_scale_op(blk, out, out, 0.5)), 10.0),
        "ops.extend": (lambda blk, x, a, b, out: blk.ops.extend([_scale_op(blk, out, out, 0.5)]), 10.0),
        "ops += [op]": (lambda blk, x, a, b, out: ops_of(blk).__iadd__([_scale_op(blk, out, out, 0.5)]), 10.0),
        "ops.insert": (lambda blk, x, a, b, out: blk.ops.insert(3, _scale_op(blk, out, out, 0.5)), 10.0),
        "block.ops = [...]": (lambda blk, x, a, b, out: setattr(blk, "ops", list(blk.ops)[:3]), 2.0),
        "ops.clear + extend": (lambda blk, x, a, b, out: (lambda kept: (blk.ops.clear(), blk.ops.extend(kept)))(
            list(blk.ops)[:3]), 2.0),
    }


@pytest.mark.parametrize("name", list(_mutations()))
def test_every_in_place_edit_makes_the_next_run_use_the_new_program(name):
    mutate, expected = _mutations()[name]
    block, x, a, b, out = _chain()
    exe = fj.Executor()
    feed = {"x": np.ones((2, 3), np.float32)}
    first, = exe.run(feed=feed, fetch_list=[out])
    np.testing.assert_allclose(first, 20.0)
    version = fj.default_main_program()._version
    mutate(block, x, a, b, out)
    assert fj.default_main_program()._version != version
    second, = exe.run(feed=feed, fetch_list=[out])
    np.testing.assert_allclose(second, expected)


def test_in_place_edit_of_a_list_attribute_is_seen():
    c = layer.fill_constant([2, 2], "float32", 1.0)
    op = fj.default_main_program().global_block().ops[-1]
    exe = fj.Executor()
    assert exe.run(fetch_list=[c])[0].shape == (2, 2)
    op.attrs["shape"][0] = 3
    assert exe.run(fetch_list=[c])[0].shape == (3, 2)
    op.attrs["shape"].append(1)
    assert exe.run(fetch_list=[c])[0].shape == (3, 2, 1)
    op.attrs["value"] = 4.0
    np.testing.assert_array_equal(exe.run(fetch_list=[c])[0], np.full((3, 2, 1), 4.0, np.float32))


def test_variable_field_edits_make_the_next_run_use_the_new_declaration():
    block, x, a, b, out = _chain()
    exe = fj.Executor()
    ones = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(exe.run(feed={"x": ones}, fetch_list=[out])[0], 20.0)

    x.dtype = "float64"                      # the feed check must follow the new dtype
    res, = exe.run(feed={"x": ones.astype(np.float64)}, fetch_list=[out])
    np.testing.assert_allclose(res, 20.0)
    with pytest.raises(fj.FeedError, match="dtype float32"):
        exe.run(feed={"x": ones}, fetch_list=[out])
    x.dtype = "float32"

    x.shape = (-1, 4)                        # and the new shape
    res, = exe.run(feed={"x": np.ones((2, 4), np.float32)}, fetch_list=[out])
    np.testing.assert_allclose(res, np.full((2, 4), 20.0))
    with pytest.raises(fj.FeedError, match="shape"):
        exe.run(feed={"x": ones}, fetch_list=[out])
    x.shape = (-1, 3)

    scope = fj.Scope()
    assert scope.find_var(a.name) is None
    a.persistable = True                     # `a` becomes state: the run writes it to the scope
    np.testing.assert_allclose(exe.run(feed={"x": ones}, fetch_list=[out], scope=scope)[0], 20.0)
    np.testing.assert_allclose(np.asarray(scope.find_var(a.name).get_tensor()), 2.0)

    version = fj.default_main_program()._version
    x.lod_level = 1
    assert fj.default_main_program()._version != version


def test_block_vars_edits_make_the_next_run_use_the_new_variables():
    block, x, a, b, out = _chain()
    exe = fj.Executor()
    ones = np.ones((2, 3), np.float32)
    exe.run(feed={"x": ones}, fetch_list=[out])
    # Replace the data variable by a float64 one: the feed check follows.
    block.vars["x"] = Variable(block, "x", (-1, 3), "float64", is_data=True, need_check_feed=True)
    np.testing.assert_allclose(exe.run(feed={"x": ones.astype(np.float64)}, fetch_list=[out])[0], 20.0)
    # Remove it: the feed is now unknown (a stale step would have run happily).
    block.vars.pop("x")
    with pytest.raises(fj.FeedError, match="'x' is not a variable"):
        exe.run(feed={"x": ones.astype(np.float64)}, fetch_list=[out])
    block.vars.update(x=Variable(block, "x", (-1, 3), "float32", is_data=True))
    np.testing.assert_allclose(exe.run(feed={"x": ones}, fetch_list=[out])[0], 20.0)
    del block.vars["x"]
    with pytest.raises(fj.FeedError):
        exe.run(feed={"x": ones}, fetch_list=[out])


def test_runs_do_not_change_the_version_and_do_not_retrace():
    block, x, a, b, out = _chain()
    exe = fj.Executor()
    feed = {"x": np.ones((2, 3), np.float32)}
    exe.run(feed=feed, fetch_list=[out])
    version, traces = fj.default_main_program()._version, exe.trace_count
    for _ in range(3):
        exe.run(feed=feed, fetch_list=[out])
    assert fj.default_main_program()._version == version and exe.trace_count == traces


def test_parsed_cloned_and_copied_programs_are_tracked_too():
    block, x, a, b, out = _chain()
    for prog in (fj.Program.parse(fj.default_main_program().serialize()), fj.default_main_program().clone(),
                 copy.deepcopy(fj.default_main_program())):
        blk = prog.global_block()
        exe = fj.Executor()
        feed = {"x": np.ones((1, 3), np.float32)}
        np.testing.assert_allclose(exe.run(prog, feed=feed, fetch_list=[out.name])[0], 20.0)
        blk.ops[3].attrs["scale"] = 0.5
        np.testing.assert_allclose(exe.run(prog, feed=feed, fetch_list=[out.name])[0], 1.0)
        blk.ops[2].inputs["X"][0] = b.name
        np.testing.assert_allclose(exe.run(prog, feed=feed, fetch_list=[out.name])[0], 1.5)
        del blk.ops[3]
        np.testing.assert_allclose(exe.run(prog, feed=feed, fetch_list=[out.name])[0], 3.0)
    # The original was never touched by the edits of its copies.
    np.testing.assert_allclose(fj.Executor().run(feed={"x": np.ones((1, 3), np.float32)}, fetch_list=[out])[0], 20.0)


def test_tracked_containers_behave_like_lists_and_dicts():
    block, x, a, b, out = _chain()
    op = block.ops[0]
    assert isinstance(block.ops, list) and isinstance(block.vars, dict) and isinstance(op.attrs, dict)
    assert op.inputs == {"X": ["x"]} and op.inputs["X"] == ["x"] and op.attrs["scale"] == 2.0
    assert block.ops[:1] == [op] and type(block.ops[:1]) is list   # slices are plain copies
    with pytest.raises(TypeError, match="list of variable names"):
        op.inputs["X"] = "x"
    assert op.inputs["X"] == ["x"]


def test_operator_and_block_constructors_take_plain_containers():
    prog = fj.Program()
    blk = prog.global_block()
    blk.create_var("x", (2,), "float32")
    blk.create_var("y", (2,), "float32")
    op = Operator(blk, "relu", {"X": ["x"]}, {"Out": ["y"]}, {"op_role": 0}, {"op_role": 0})
    version = prog._version
    blk.ops = [op]
    assert prog._version != version
    version = prog._version
    op.outputs["Out"].append("x")
    assert prog._version != version


# -- 5. symbolic comparisons and NumPy operands ------------------------------------------------
_COMPARE = [("==", "equal", np.equal), ("!=", "not_equal", np.not_equal), ("<", "less_than", np.less),
            ("<=", "less_equal", np.less_equal), (">", "greater_than", np.greater),
            (">=", "greater_equal", np.greater_equal)]
_SWAPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@pytest.mark.parametrize("symbol,op_type,np_fn", _COMPARE, ids=[c[1] for c in _COMPARE])
def test_comparisons_append_paddle_compare_ops(symbol, op_type, np_fn):
    x = layer.data("x", input_size=4)
    y = layer.data("y", input_size=4)
    ops = fj.default_main_program().global_block().ops
    compare = eval(f"lambda a, b: a {symbol} b")  # noqa: S307 - the operator under test
    vv, vn, nv = compare(x, y), compare(x, 0.5), compare(0.5, x)
    for v in (vv, vn, nv):
        assert isinstance(v, Variable) and v.dtype == "bool" and v.shape == (-1, 4)
    swapped = {s: t for s, t, _ in _COMPARE}[_SWAPPED[symbol]]
    assert [op.type for op in ops] == [op_type, "fill_constant", op_type, "fill_constant", swapped]
    xs = np.array([[0.0, 0.5, 1.0, 2.0]], np.float32)
    ys = np.array([[0.5, 0.5, 0.0, 3.0]], np.float32)
    got = fj.Executor().run(feed={"x": xs, "y": ys}, fetch_list=[vv, vn, nv])
    np.testing.assert_array_equal(got[0], np_fn(xs, ys))
    np.testing.assert_array_equal(got[1], np_fn(xs, np.float32(0.5)))
    np.testing.assert_array_equal(got[2], np_fn(np.float32(0.5), xs))


def test_variables_stay_usable_as_dict_keys_and_set_members():
    x = layer.data("x", input_size=2)
    y = layer.data("y", input_size=2)
    n_ops = len(fj.default_main_program().global_block().ops)
    table = {x: "x", y: "y"}
    assert table[x] == "x" and table[y] == "y" and x in {x, y} and len({x, y, x}) == 2
    assert x in [x] and (x == None) is False and (x != "x") is True  # noqa: E711
    assert len(fj.default_main_program().global_block().ops) == n_ops  # none of that built ops
    with pytest.raises(fj.SymbolicValueError, match="bool"):
        if x == y:
            pass


@pytest.mark.parametrize("expr", [
    "np.ones(4) + v", "v + np.ones(4)", "np.ones(4) - v", "v - np.ones(4)", "np.ones(4) * v",
    "v * np.ones(4)", "np.ones(4) / v", "v / np.ones(4)", "np.ones(4) < v", "v >= np.ones(4)",
    "np.ones(4) == v", "v + [1.0, 2.0]", "np.array(2.0) * v"])
def test_numpy_operands_give_a_clear_fluidjax_error(expr):
    v = layer.data("v", input_size=4)
    before = fj.default_main_program().serialize()
    with pytest.raises(fj.SymbolicValueError, match=r"Variable 'v'.*fill_constant") as info:
        eval(expr, {"np": np, "v": v})  # noqa: S307
    assert "Concatenation" not in str(info.value)
    assert fj.default_main_program().serialize() == before


def test_numpy_scalars_work_like_python_numbers():
    v = layer.data("v", input_size=2)
    outs = [np.float32(2.0) + v, v * np.float64(3.0), np.int64(1) - v, v > np.float32(0.5)]
    got = fj.Executor().run(feed={"v": np.array([[1.0, 0.0]], np.float32)}, fetch_list=outs)
    np.testing.assert_allclose(got[0], [[3.0, 2.0]])
    np.testing.assert_allclose(got[1], [[3.0, 0.0]])
    np.testing.assert_allclose(got[2], [[0.0, 1.0]])
    np.testing.assert_array_equal(got[3], [[True, False]])


def test_operators_build_into_the_variables_own_program():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", input_size=2)
    y = x * 2.0 + 1.0          # outside the guard: still main's
    c = y > 1.0
    assert y.block.program is main and c.block.program is main
    assert not fj.default_main_program().global_block().ops


# -- 6. a failed layer call leaves no debris -----------------------------------------------------
def test_a_variable_of_another_program_is_refused_and_leaves_both_programs_as_they_were():
    main_a, startup_a = fj.Program(), fj.Program()
    with fj.program_guard(main_a, startup_a):
        x = layer.data("x", input_size=4)
        hidden = layer.fc(x, output_size=3)                          # fc_0 (a data variable would be fed by name)
    main_b, startup_b = fj.Program(), fj.Program()
    with fj.program_guard(main_b, startup_b):
        z = layer.data("z", input_size=4)
        before = (main_b.serialize(), startup_b.serialize(), main_b._version, startup_b._version)
        a_before = (main_a.serialize(), startup_a.serialize(), main_a._version)
        with pytest.raises(KeyError) as info:
            layer.fc(hidden, output_size=5)                          # hidden is main_a's
        assert isinstance(info.value, fj.VariableNotFoundError)
        message = str(info.value)
        assert f"'{hidden.name}'" in message and f"program #{main_a._uid}" in message and f"program #{main_b._uid}" in message
        assert (main_b.serialize(), startup_b.serialize(), main_b._version, startup_b._version) == before
        assert (main_a.serialize(), startup_a.serialize(), main_a._version) == a_before
        assert not any(name.startswith("fc_1") for name in main_b.global_block().vars)
        assert not startup_b.global_block().vars and not startup_b.global_block().ops
        # A valid call afterwards works; the names the failed call drew stay drawn (as in Paddle).
        h = layer.fc(z, output_size=2)
    assert [p.name for p in main_b.all_parameters()] == ["fc_2.w_0", "fc_2.b_0"]
    assert sorted(startup_b.global_block().vars) == ["fc_2.b_0", "fc_2.w_0"]
    assert h.name == "fc_2.tmp_1" and not any("fc_1" in n for n in main_b.global_block().vars)
    exe = fj.Executor()
    scope = fj.Scope()
    exe.run(startup_b, scope=scope)
    out, = exe.run(main_b, feed={"z": np.ones((3, 4), np.float32)}, fetch_list=[h], scope=scope)
    assert out.shape == (3, 2)


def test_a_layer_failing_late_undoes_its_earlier_ops_and_sub_layers():
    x = layer.data("x", input_size=4)
    main, startup = fj.default_main_program(), fj.default_startup_program()
    before = (main.serialize(), startup.serialize(), main._version, main.current_block().idx)

    def exploding_activation(h):
        layer.relu(h)              # a nested layer call that succeeds ...
        raise RuntimeError("boom")  # ... then the outer call fails

    with pytest.raises(RuntimeError, match="boom"):
        layer.fc(x, output_size=3, activation=exploding_activation)
    assert (main.serialize(), startup.serialize(), main._version, main.current_block().idx) == before
    y = layer.fc(x, output_size=3)
    assert y.name == "fc_1.tmp_1" and "fc_1.w_0" in main.global_block().vars


def test_a_failing_operator_leaves_no_debris():
    x = layer.data("x", input_size=4)
    y = layer.data("y", input_size=3)
    with fj.program_guard(fj.Program()):
        other = layer.scale(layer.data("other", input_size=4), 2.0)   # not data: not fed by name
    before = fj.default_main_program().serialize()
    with pytest.raises(fj.ShapeError):
        x + y                  # its output variable was made before the op failed: undone
    with pytest.raises(fj.VariableNotFoundError, match=f"'{other.name}' belongs to program"):
        x > other
    assert fj.default_main_program().serialize() == before


def test_failed_nested_call_caught_inside_a_layer_is_undone_alone():
    from fluidjax.ir import tracking

    x = layer.data("x", input_size=4)
    main = fj.default_main_program()

    def layer_fn():
        kept = layer.relu(x)
        try:
            layer.fc(x, output_size=3, activation="no_such_activation")  # fails late: undone alone
        except ValueError:
            pass
        try:  # a data layer and an add that fails, as one nested transaction
            tracking.atomic_call(lambda: layer.elementwise_add(kept, layer.data("w", input_size=5)))
        except fj.ShapeError:
            pass
        return kept

    kept = tracking.atomic_call(layer_fn)
    assert [op.type for op in main.global_block().ops] == ["relu"]
    assert set(main.global_block().vars) == {"x", kept.name}


def test_a_failed_transaction_restores_edits_of_existing_ops_variables_and_blocks():
    from fluidjax.ir import tracking

    block, x, a, b, out = _chain()
    prog = fj.default_main_program()
    before = (prog.serialize(), prog._version, prog.num_blocks, prog.current_block().idx)
    with pytest.raises(RuntimeError, match="late"):
        with tracking.atomic():
            block.ops[0].attrs["scale"] = 9.0
            block.ops[1].inputs["X"][0] = a.name
            del block.ops[3]
            block.vars.pop(b.name)
            x.shape = (-1, 5)
            sub = prog.create_block()
            sub.create_var("inner", (1,), "float32")
            raise RuntimeError("late")
    assert (prog.serialize(), prog._version, prog.num_blocks, prog.current_block().idx) == before
    assert x.shape == (-1, 3) and block.vars[b.name] is b
    np.testing.assert_allclose(fj.Executor().run(feed={"x": np.ones((1, 3), np.float32)}, fetch_list=[out])[0], 20.0)


def test_the_seed_variable_constructor_is_all_or_nothing():
    main, startup = fj.default_main_program(), fj.default_startup_program()
    before = (main.serialize(), startup.serialize())
    with pytest.raises(Exception):
        fj.Variable("v", data_type="float32", shape=[2], value="not a number")
    assert (main.serialize(), startup.serialize()) == before
    v = fj.Variable("v", data_type="float32", shape=[2], value=1.0)
    assert v.name == "v" and main.global_block().vars["v"] is v


def test_set_inferred_bumps_once_checks_dims_and_rolls_back():
    from fluidjax.ir import tracking

    v = fj.Program().global_block().create_var("v", (-1, 3), "float32")
    prog = v.block.program
    version = prog._version
    v._set_inferred((-1, 4), "float64", 1)
    assert (v.shape, v.dtype, v.lod_level) == ((-1, 4), "float64", 1) and prog._version != version
    with pytest.raises(fj.ShapeError, match="variable 'v'"):
        v._set_inferred((-9,), "float32", 0)
    with pytest.raises(RuntimeError):
        with tracking.atomic():
            v._set_inferred((2, 2), "int32", 0)
            raise RuntimeError
    assert (v.shape, v.dtype, v.lod_level) == ((-1, 4), "float64", 1)
