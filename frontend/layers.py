"""The layer API, ``fj.layer`` (and Fluid's ``fluidjax.layers``): functions that append ops to the
default main program and return Variables. Each family lives in its own module; this one gathers
them and makes every public layer atomic (and Fluid-spelled: :mod:`.layer_args`).

>>> x = data("images", input_size=64 * 64)                 # (-1, 4096)
>>> y = fc(x, output_size=100, activation="softmax")       # (-1, 100)
>>> y = fc(x, size=100, act="softmax")                     # Fluid's spelling, the same layer
"""

from __future__ import annotations

from .layer_helper import atomic_layer

from .refused_layers import *  # noqa: E402,F401,F403  (first: a family defining a name wins)
from .data_layers import *  # noqa: E402,F401,F403
from .math_layers import *  # noqa: E402,F401,F403
from .nn_layers import *  # noqa: E402,F401,F403
from .tensor_layers import *  # noqa: E402,F401,F403
from .sequence_layers import *  # noqa: E402,F401,F403
from .recurrent_layers import *  # noqa: E402,F401,F403
from .crf_layers import *  # noqa: E402,F401,F403
from .control_flow_layers import *  # noqa: E402,F401,F403
from .dynamic_rnn import *  # noqa: E402,F401,F403
from .rnn_layers import *  # noqa: E402,F401,F403
from .rnn_cells import *  # noqa: E402,F401,F403
from .decoding import *  # noqa: E402,F401,F403
from .lr_decay_layers import *  # noqa: E402,F401,F403
from .activation_layers import *  # noqa: E402,F401,F403
from .tensor_math_layers import *  # noqa: E402,F401,F403
from .ctc_metric_layers import *  # noqa: E402,F401,F403
from .vision_layers import *  # noqa: E402,F401,F403
from .detection_layers import *  # noqa: E402,F401,F403
from .creation_layers import *  # noqa: E402,F401,F403
from .feature_layers import *  # noqa: E402,F401,F403
from .host_layers import *  # noqa: E402,F401,F403
from .distributions import *  # noqa: E402,F401,F403
from .loss_layers import *  # noqa: E402,F401,F403
from .py_reader import *  # noqa: E402,F401,F403
from .detection_box_layers import *  # noqa: E402,F401,F403
from .detection_target_layers import *  # noqa: E402,F401,F403
from .roi_layers import *  # noqa: E402,F401,F403
from .sampled_loss_layers import *  # noqa: E402,F401,F403
from .ctr_layers import *  # noqa: E402,F401,F403


def _make_atomic() -> None:
    """Wrap every public layer function with :func:`~.layer_helper.atomic_layer`: each public
    function of ``fj.layer`` defined in ``fluidjax.frontend`` (this module and the families it
    star-imports), both here and in its defining module (so ``from ..nn_layers import conv2d``
    is atomic too, and layers calling each other go through the wrapped versions)."""
    import inspect
    import sys

    package = __name__.rsplit(".", 1)[0] + "."
    namespace = globals()
    for name, fn in list(namespace.items()):
        if name.startswith("_") or not inspect.isfunction(fn) or getattr(fn, "__fluidjax_atomic__", False):
            continue
        module = sys.modules.get(fn.__module__)
        if not fn.__module__.startswith(package) or name not in getattr(module, "__all__", ()):
            continue
        wrapped = atomic_layer(fn)
        namespace[name] = wrapped
        if getattr(module, name, None) is fn:
            setattr(module, name, wrapped)


_make_atomic()
