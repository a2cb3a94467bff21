"""Op definitions, one module per family; importing this package registers them all.

Each op is defined once, in the module of its family (the table is in ``docs/ops-layout.md``), by
an ``@op`` decorator that spells its type on its JAX rule. Modules whose names start with an
underscore hold what several families share and define no op.
"""

from . import (activation, beam_search, concat_split, conditional, conv, crf, detection,  # noqa: F401
               gather_scatter, linalg, lod_array, logic, loss, math, nn, norm, optimizer, pooling, random,
               recurrent, recurrent_lod, reduce, reshaping, resize, rnn, search, sequence, sequence_layout,
               sequence_window, slicing, tensor, tensor_array, unary_math, while_loop)
from . import ctc  # noqa: F401,E402  (warpctc, ctc_align)
from . import averaging, optimizer_adaptive  # noqa: F401,E402  (Fluid 1.x's optimizers and ModelAverage)
from . import loss_scaling  # noqa: F401,E402  (mixed precision: fj.amp's dynamic loss scaling)
from . import callback  # noqa: F401,E402  (print, py_func: Python on the host during a run)
# Fluid 1.x's remaining layers: detection, ROI variants, sampled losses, CTR ops
from . import (ctr, detection_boxes, detection_labels, detection_map, detection_nms, detection_target,  # noqa: F401,E402
               roi_variants, sampled_loss)
from ._counts import declare_families  # noqa: E402  (which ops take a counted value row by row)
declare_families()
