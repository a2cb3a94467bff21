"""Op-table rows of the host-callback ops (``lowering/ops/callback.py``): ``print`` against Paddle 2.6.2
(its output is its input, its gradient the output's; what it prints is checked in
``tests/test_fluid1_host_layers.py``), ``py_func`` by a check against NumPy (its functions live in the
process that built the program, so Paddle cannot run it)."""

from __future__ import annotations

import numpy as np

import fluidjax as fj
from optable import Case, own_stream

rand, _ = own_stream(2028)


def _check_py_func(case):
    from fluidjax.lowering.ops.callback import register_callable

    main = fj.Program()
    block = main.global_block()
    x = block.create_var("x", (-1, 3), "float64")
    out = block.create_var("out", (-1, 3), "float64")
    block.append_op("py_func", {"X": [x]}, {"Out": [out]},
                    {"forward_callable_id": register_callable(lambda a: np.sin(a)),
                     "backward_callable_id": register_callable(lambda a, y, dy: dy * np.cos(a)),
                     "backward_skip_vars": []})
    assert block.var("out").shape == (-1, 3)
    loss = block.create_var("loss", (), "float64")
    block.append_op("reduce_sum", {"X": [out]}, {"Out": [loss]}, {"reduce_all": True})
    fj.append_backward(loss)
    xv = rand(4, 3, dtype="float64")
    got, grad = fj.Executor().run(main, feed={"x": xv}, fetch_list=["out", "x@GRAD"], scope=fj.Scope())
    np.testing.assert_allclose(got, np.sin(xv), rtol=1e-12)
    np.testing.assert_allclose(grad, np.cos(xv), rtol=1e-12)


CASES = [
    Case("print", {"In": rand(3, 4)}, {"summarize": 3, "message": "op-table"}),
    Case("print", {"In": rand(5, 2, dtype="float64")}, {"print_phase": "FORWARD", "first_n": 1}, lod={"In": [[2, 3]]},
         name="lod-f64"),
    Case("py_func", check=_check_py_func),
]
