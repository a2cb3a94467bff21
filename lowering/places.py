"""Places name devices, as in Paddle; each maps to a JAX device."""

from __future__ import annotations

import jax


class Place:
    """A device; ``jax_device()`` gives the JAX device it names."""

    platform = "cpu"

    def __init__(self, device_id: int = 0) -> None:
        self.device_id = int(device_id)

    def jax_device(self) -> jax.Device:
        """The JAX device this place names; a clear error when JAX has none."""
        try:
            devices = jax.devices(self.platform)
        except RuntimeError:
            devices = []
        if self.device_id >= len(devices):
            raise RuntimeError(f"{self!r}: JAX sees {len(devices)} {self.platform} device(s) "
                               f"({[str(d) for d in jax.devices()]} available)")
        return devices[self.device_id]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.device_id})" if self.platform != "cpu" else "CPUPlace()"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.device_id == other.device_id

    def __hash__(self) -> int:
        return hash((self.platform, self.device_id))


class CPUPlace(Place):
    """The host CPU."""

    def __init__(self) -> None:
        super().__init__(0)


class CUDAPlace(Place):
    """NVIDIA GPU number ``device_id``."""

    platform = "gpu"


class TPUPlace(Place):
    """TPU core number ``device_id``."""

    platform = "tpu"


class CUDAPinnedPlace(CPUPlace):
    """Fluid's page-locked host memory: the host CPU here (JAX manages transfers itself)."""


def is_compiled_with_cuda() -> bool:
    """Whether JAX in this process can use an NVIDIA GPU (Fluid's ``is_compiled_with_cuda``)."""
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def cpu_places(device_count: int | None = None) -> list[CPUPlace]:
    """``device_count`` CPU places (default: ``CPU_NUM`` from the environment, else 1), as Fluid's."""
    import os

    count = int(os.environ.get("CPU_NUM", 1)) if device_count is None else int(device_count)
    return [CPUPlace() for _ in range(count)]


def cuda_places(device_ids=None) -> list[CUDAPlace]:
    """A CUDAPlace per visible GPU (or per id in ``device_ids``), as Fluid's ``cuda_places``."""
    if device_ids is None:
        try:
            device_ids = range(len(jax.devices("gpu")))
        except RuntimeError:
            device_ids = []
    return [CUDAPlace(i) for i in device_ids]
