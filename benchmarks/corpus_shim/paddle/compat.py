"""paddle.compat of Paddle 1.x: text/bytes helpers the models' scripts import."""
import math

long_type = int
int_type = int


def to_text(obj, encoding="utf-8", inplace=False):
    if isinstance(obj, (list, set)):
        return type(obj)(to_text(o, encoding) for o in obj)
    return obj.decode(encoding) if isinstance(obj, bytes) else obj


def to_bytes(obj, encoding="utf-8", inplace=False):
    if isinstance(obj, (list, set)):
        return type(obj)(to_bytes(o, encoding) for o in obj)
    return obj.encode(encoding) if isinstance(obj, str) else obj


def round(x, d=0):
    p = 10 ** d
    return float(math.floor(x * p + math.copysign(0.5, x))) / p


def floor_division(x, y):
    return x // y


def get_exception_message(exc):
    return str(exc)
