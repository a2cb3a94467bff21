"""The runtime Scope and its lazily-filled variables (seeds 000/001)."""

import numpy as np
import pytest

import fluidjax as fj


def test_holder_is_empty_until_get_mutable():
    scope = fj.Scope()
    v = scope.var("a")
    assert not v.is_initialized()
    t = v.get_mutable(fj.LoDTensor)
    assert isinstance(t, fj.LoDTensor) and not t._is_initialized()
    assert v.get_mutable(fj.LoDTensor) is t
    t.set(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert t.shape() == (2, 3)
    np.testing.assert_array_equal(np.asarray(v.get_tensor()), np.arange(6).reshape(2, 3))


def test_wrong_kind_is_a_type_error():
    scope = fj.Scope()
    v = scope.var("a")
    v.get_mutable(fj.LoDTensor)
    with pytest.raises(TypeError, match="holds a LoDTensor, not a str"):
        v.get(str)
    with pytest.raises(TypeError, match="holds a LoDTensor"):
        v.get_mutable(list)
    s = scope.var("s")
    s.get_mutable(str)
    with pytest.raises(TypeError):
        s.get(fj.LoDTensor)
    with pytest.raises(TypeError, match="nothing"):
        scope.var("empty").get(fj.LoDTensor)
    ids = scope.var("ids").get_mutable(list)
    ids.extend([1, 2])
    assert scope.var("ids").get(list) == [1, 2]


def test_child_scopes_fall_back_to_parents():
    root = fj.Scope()
    root.var("w").get_mutable(fj.LoDTensor).set(np.ones(2))
    kid = root.new_scope()
    assert kid.find_var("w") is root.find_var("w")
    kid.var("local")
    assert root.find_var("local") is None and kid.find_var("local") is not None
    assert root.find_var("unknown") is None
    nested = root.var("step").get_mutable(fj.Scope)
    assert isinstance(nested, fj.Scope)


def test_lod_tensor_lod():
    t = fj.LoDTensor()
    t.set(np.zeros((5, 2), np.float32))
    t.set_recursive_sequence_lengths([[2, 3]])
    assert t.lod() == [[0, 2, 5]] and t.recursive_sequence_lengths() == [[2, 3]]
