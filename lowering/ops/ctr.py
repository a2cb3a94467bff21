"""CTR and recommendation ops of Fluid 1.x (data_norm, continuous_value_model, filter_by_instag, hash) and the SelectedRows/inplace odds."""

from __future__ import annotations
