"""paddlehub (PaddleHub, not installable here): present so that a module importing it at its top
(PaddleNLP's shared ``models/representation/ernie.py``, which LAC imports whatever its flags) loads;
every use (``hub.Module``, ``hub.connect_program``: the ERNIE branches) raises, naming the call."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise ModuleNotFoundError("paddlehub is not installed (the corpus runner's stand-in only lets its import "
                              "succeed): paddlehub.%s was used" % name, name="paddlehub")
