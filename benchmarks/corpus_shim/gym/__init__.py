"""A synthetic stand-in for OpenAI gym (not installed here): the Env / Wrapper classes and spaces
the DeepQNetwork scripts build on; the game itself is atari_py's synthetic ALEInterface."""
from . import spaces  # noqa: F401

__version__ = "0.10.5"


class Env(object):
    metadata = {}
    reward_range = (-float("inf"), float("inf"))
    action_space = observation_space = None

    def step(self, action):
        raise NotImplementedError

    def reset(self, **kwargs):
        raise NotImplementedError

    def seed(self, seed=None):
        return [seed]

    def close(self):
        pass

    @property
    def unwrapped(self):
        return self


class Wrapper(Env):
    def __init__(self, env):
        self.env = env
        self.action_space = env.action_space
        self.observation_space = env.observation_space

    def step(self, action):
        return self.env.step(action)

    def reset(self, **kwargs):
        return self.env.reset(**kwargs)

    def __getattr__(self, name):
        return getattr(self.env, name)

    @property
    def unwrapped(self):
        return self.env.unwrapped


class ObservationWrapper(Wrapper):
    def step(self, action):
        obs, reward, done, info = self.env.step(action)
        return self.observation(obs), reward, done, info

    def reset(self, **kwargs):
        return self.observation(self.env.reset(**kwargs))
