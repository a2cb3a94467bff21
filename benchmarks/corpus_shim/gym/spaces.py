"""gym.spaces: Discrete and Box (shape, bounds, dtype, sample)."""
import numpy as np


class Discrete(object):
    def __init__(self, n):
        self.n = n
        self.shape, self.dtype = (), np.int64

    def sample(self):
        return int(np.random.randint(self.n))


class Box(object):
    def __init__(self, low, high, shape=None, dtype=np.float32):
        self.shape = tuple(shape) if shape is not None else np.shape(low)
        self.low, self.high, self.dtype = low, high, dtype

    def sample(self):
        return np.random.uniform(self.low, self.high, self.shape).astype(self.dtype)
