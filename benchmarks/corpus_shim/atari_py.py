"""A synthetic atari_py.ALEInterface (no emulator or ROMs here): 210x160 RGB screens with a
moving block, 4 actions, reward 1 when the action matches the block's column parity, episodes of
120 frames with 3 lives."""
import numpy as np


class ALEInterface(object):
    def __init__(self):
        self._t, self._lives, self._rng = 0, 3, np.random.RandomState(0)

    def setInt(self, key, value):
        if key == b"random_seed":
            self._rng = np.random.RandomState(value)

    def setBool(self, key, value):
        pass

    setFloat = setString = setBool

    def loadROM(self, path):
        pass

    def getScreenDims(self):
        return 160, 210

    def getMinimalActionSet(self):
        return [0, 1, 3, 4]

    def getScreenRGB(self):
        screen = np.zeros((210, 160, 3), np.uint8)
        x = (self._t * 7) % 150
        screen[100:120, x:x + 10] = 200
        return screen

    def reset_game(self):
        self._t, self._lives = 0, 3

    def act(self, action):
        self._t += 1
        if self._t % 40 == 0:
            self._lives -= 1
        return float(action % 2 == ((self._t * 7) % 150 // 10) % 2)

    def game_over(self):
        return self._t >= 120 or self._lives <= 0

    def lives(self):
        return self._lives
