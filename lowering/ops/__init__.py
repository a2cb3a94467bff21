"""Op definitions, one module per family; importing this package registers them all."""

from . import (activation, conditional, conv, crf, extra, logic, loss, manipulation, math, nn,  # noqa: F401
               norm, optimizer, random, recurrent, recurrent_lod, reduce, rnn, sequence, sequence_layout,
               sequence_window, tensor, tensor_array, vision, while_loop)
from . import extra_nn  # noqa: F401,E402
from . import legacy  # noqa: F401,E402
from . import lod_array  # noqa: F401,E402
from . import beam_search  # noqa: F401,E402
from . import averaging, optimizer_adaptive  # noqa: F401,E402  (Fluid 1.x's optimizers and ModelAverage)
