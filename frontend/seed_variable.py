"""The seeds' ``Variable(name, data_type, shape, value)`` constructor for persistable variables."""

from __future__ import annotations

from ..ir import dtypes
from ..ir import variable as ir_variable
from ..ir.program import default_main_program, default_startup_program
from .initializer import fill_constant_attrs
from .layer_helper import atomic_layer


class _VariableMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, ir_variable.Variable)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, ir_variable.Variable)


class Variable(metaclass=_VariableMeta):
    """A persistable variable of the default main program, initialised by the startup program.

    ``Variable("X", shape=[784, 10], data_type="int32", value=0)`` makes a tensor variable;
    ``Variable("S", data_type="string", value="aa")`` a string variable. Like every variable it
    holds no value until the startup program runs. ``isinstance(v, Variable)`` is true of every
    symbolic variable.
    """

    def __new__(cls, name: str | None = None, data_type="float32", shape=None, value=None,
                trainable: bool = True) -> ir_variable.Variable:
        return _make_variable(name, data_type, shape, value, trainable)


@atomic_layer
def _make_variable(name, data_type, shape, value, trainable) -> ir_variable.Variable:
    """``Variable(...)``: the variable in the main program and its fill op in the startup
    program, all or nothing (see ``atomic_layer``)."""
    main = default_main_program().global_block()
    startup = default_startup_program().global_block()
    if name is None:
        from ..ir import unique_name

        name = unique_name.generate("variable")
    if data_type == "string" or data_type is str:
        if shape not in (None, [], ()):
            raise ValueError("a string Variable has no shape")
        var = main.create_var(name, (), None, type=dtypes.STRING, persistable=True, stop_gradient=True)
        out = startup.create_var(name, (), None, type=dtypes.STRING, persistable=True, stop_gradient=True)
        startup.append_op("fill_string", outputs={"Out": out}, attrs={"value": "" if value is None else str(value)})
        return var
    dtype = dtypes.normalize(data_type)
    shape = tuple(shape or ())
    if any(int(d) < 0 for d in shape):
        raise ValueError(f"Variable {name!r}: a persistable variable needs a known shape, got {shape}")
    var = main.create_var(name, shape, dtype, persistable=True, stop_gradient=not trainable)
    if value is not None:
        out = startup.create_var(name, shape, dtype, persistable=True, stop_gradient=not trainable)
        startup.append_op("fill_constant", outputs={"Out": out}, attrs=fill_constant_attrs(shape, dtype, value))
    return var
