"""Run the PaddlePaddle book's Fluid 1.x chapter scripts, text untouched, on fluidjax.

    python benchmarks/book_scripts.py /tmp/book              # every chapter
    python benchmarks/book_scripts.py /tmp/book --only mt_train --only fit_a_line

``/tmp/book`` is a checkout of PaddlePaddle/book (302a59f, with ``08.machine_translation/train.py``
from b030b6c); its scripts are not part of this repository. Each script runs in its own
subprocess, with the chapter's folder as working directory and ``sys.argv`` as the book's
instructions give it, under a generated ``paddle`` package put first on ``sys.path``:

- ``paddle.fluid`` (and every ``paddle.fluid.*`` module path) is ``fluidjax``; ``paddle.batch`` is
  ``fluidjax.batch``, ``paddle.reader`` is ``fluidjax.reader``.
- ``paddle.dataset.{uci_housing, mnist, cifar, imikolov, movielens, imdb, conll05, wmt14, wmt16}``
  are small synthetic readers with the real datasets' fields, dtypes, id ranges, dictionary sizes
  and LoD structure (variable-length sequences), whose targets depend on the inputs so that a
  loss can fall. How many samples they yield is the runner's cap on the steps of a script whose
  epoch count is fixed in its text (``BOOK_DATA``: JSON, per dataset ``train`` / ``test`` sample
  counts, ``len`` sequence-length range, ``vocab`` where a dictionary size is the cap).

The real Paddle is never imported. Epochs are capped by the scripts' own command-line flags
(``--num_epochs``, dc_gan's ``--epoch``) or by the readers' lengths; the one exception is the
beam decoders' ``max_length`` (the decode loop's bound, 256 in the text: an untrained model
never emits the end token, so it would decode 256 steps), rewritten when the script is compiled
(``overrides``: module-level assignments ``NAME``, and keyword arguments of module-level calls
``"func(kw=...)"``; the file on disk is unchanged) and reported.

Per script the child records (through wrappers around ``fluidjax.Executor.run`` and
``fluidjax.io``'s save/load calls) every training step's first fetched value and wall time,
the saves and loads, the runs after a load (inference), peak RSS, and the first error with the
script's traceback line and the innermost one. The parent prints a table of the results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# -- the scripts and their settings ---------------------------------------------------------------
# data: BOOK_DATA for the synthetic readers. args: the script's own flags. env: extra environment.
SCRIPTS = [
    dict(name="fit_a_line", path="01.fit_a_line/train.py", args=["--num_epochs", "5"],
         data={"uci_housing": {"train": 404, "test": 102}}, batch="20"),
    dict(name="recognize_digits", path="02.recognize_digits/train.py", args=["--num_epochs", "2"],
         data={"mnist": {"train": 256, "test": 128}}, batch="64"),
    dict(name="image_classification", path="03.image_classification/train.py",
         args=["--num_epochs", "1"], data={"cifar": {"train": 512, "test": 128}}, batch="128"),
    dict(name="word2vec", path="04.word2vec/train.py", args=["--num_epochs", "5"],
         data={"imikolov": {"train": 5000, "test": 200, "vocab": 400}}, batch="100"),
    dict(name="recommender_system", path="05.recommender_system/train.py", args=["--num_epochs", "1"],
         data={"movielens": {"train": 21 * 256, "test": 256}}, env={"FLAGS_fetch_0d_as_1d": "1"},
         batch="256"),
    dict(name="sentiment_conv", path="06.understand_sentiment/train_conv.py", args=["--num_epochs", "1"],
         data={"imdb": {"train": 1280, "test": 128, "len": [8, 64]}}, batch="128"),
    dict(name="sentiment_dyn_rnn", path="06.understand_sentiment/train_dyn_rnn.py",
         args=["--num_epochs", "1"], data={"imdb": {"train": 1280, "test": 128, "len": [8, 64]}},
         batch="128"),
    dict(name="sentiment_stacked_lstm", path="06.understand_sentiment/train_stacked_lstm.py",
         args=["--num_epochs", "1"], data={"imdb": {"train": 1280, "test": 128, "len": [8, 64]}},
         batch="128"),
    dict(name="label_semantic_roles", path="07.label_semantic_roles/train.py", args=["--num_epochs", "2"],
         data={"conll05": {"test": 200, "len": [5, 30]}}, batch="10"),
    dict(name="mt_train", path="08.machine_translation/train.py", args=[],
         data={"wmt16": {"train": 64, "test": 64, "len": [4, 12], "epochs": 4}},
         overrides={"max_length": 8}, batch="64"),
    dict(name="mt_seq2seq", path="08.machine_translation/seq2seq.py", args=[],
         data={"wmt16": {"train": 64, "test": 64, "len": [4, 12], "epochs": 4}}, overrides={"max_length": 8},
         batch="64"),
    dict(name="dc_gan", path="09.gan/dc_gan.py",
         args=["--batch_size", "128", "--epoch", "1", "--use_gpu", "False"],
         data={"mnist": {"train": 512}}, batch="128"),
]

# -- the generated ``paddle`` package -------------------------------------------------------------
SHIM: dict[str, str] = {}

SHIM["paddle/__init__.py"] = '''
"""paddle for the book runner: paddle.fluid is fluidjax; datasets are synthetic."""
import sys
import fluidjax                                    # jax first
sys.modules["paddle.fluid"] = fluidjax
for _name, _module in list(sys.modules.items()):
    if _name.startswith("fluidjax."):
        sys.modules["paddle.fluid" + _name[len("fluidjax"):]] = _module


class _FluidPaths(object):
    """paddle.fluid.X imports fluidjax.X (or fluidjax's module attribute X) when it was not yet
    imported: any Fluid module path fluidjax offers resolves; the others fail as missing."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("paddle.fluid."):
            return None
        import importlib, importlib.util, types
        real = "fluidjax" + fullname[len("paddle.fluid"):]
        try:
            module = importlib.import_module(real)
        except ImportError:
            parent, _, leaf = real.rpartition(".")
            try:
                module = getattr(importlib.import_module(parent), leaf, None)
            except ImportError:
                module = None
            if not isinstance(module, types.ModuleType):
                return None

        own_spec = getattr(module, "__spec__", None)

        class _Loader(object):
            def create_module(self, spec):
                return module

            def exec_module(self, m):                  # the import set paddle.fluid's spec: undo
                m.__spec__ = own_spec
        return importlib.util.spec_from_loader(fullname, _Loader())


sys.meta_path.insert(0, _FluidPaths())
fluid = fluidjax
batch = fluidjax.batch
reader = fluidjax.reader
sys.modules["paddle.reader"] = reader
from . import dataset                              # noqa: E402
__version__ = "1.8.0"

try:                                               # Pillow >= 10 dropped the alias the book uses
    from PIL import Image as _Image
    if not hasattr(_Image, "ANTIALIAS"):
        _Image.ANTIALIAS = _Image.LANCZOS
except ImportError:
    pass
'''

SHIM["paddle/dataset/__init__.py"] = '''
from . import uci_housing, mnist, cifar, imikolov, movielens, imdb, conll05, wmt14, wmt16, common  # noqa
'''

SHIM["paddle/dataset/common.py"] = '''
import json, os
import numpy as np

DATA_HOME = os.path.expanduser("~/.cache/paddle/dataset")


def sizes(name, **defaults):
    """This dataset's settings: BOOK_DATA (JSON) over the defaults."""
    got = dict(defaults)
    got.update(json.loads(os.environ.get("BOOK_DATA", "{}")).get(name, {}))
    return got


def rng(name, part):
    return np.random.RandomState(sum(map(ord, name + part)) * 7919 % (2 ** 31))


def zipf(r, n, size, s=1.1):
    """Ids in [0, n) drawn with probability ~ 1 / (rank + 1) ** s (text-like frequencies)."""
    p = 1.0 / np.arange(1, n + 1) ** s
    return r.choice(n, size=size, p=p / p.sum())


def capped(name, reader):
    """A reader creator whose readers after the first ``epochs`` (BOOK_DATA) are empty: the cap on
    the steps of a script whose epoch count is fixed in its text."""
    epochs = sizes(name).get("epochs")
    if not epochs:
        return reader
    calls = [0]

    def capped_reader():
        calls[0] += 1
        return reader() if calls[0] <= epochs else iter(())
    return capped_reader


def lengths(r, count, lo_hi):
    lo, hi = lo_hi
    return r.randint(lo, hi + 1, size=count)
'''

SHIM["paddle/dataset/uci_housing.py"] = '''
"""UCI housing: 13 normalised float32 features, a float32 [1] price (404 train, 102 test)."""
import numpy as np
from .common import capped, sizes, rng

feature_names = ["CRIM", "ZN", "INDUS", "CHAS", "NOX", "RM", "AGE", "DIS", "RAD", "TAX", "PTRATIO",
                 "B", "LSTAT"]
_W = np.random.RandomState(13).uniform(-12, 12, size=13).astype("float32")


def _reader(part):
    n = sizes("uci_housing", train=404, test=102)[part]

    def reader():
        r = rng("uci_housing", part)
        for _ in range(n):
            x = r.uniform(-0.5, 0.5, size=13).astype("float32")
            y = np.array([22.5 + x @ _W + r.normal(0, 2)], dtype="float32")
            yield x, y
    return capped("uci_housing", reader)


def train():
    return _reader("train")


def test():
    return _reader("test")
'''

SHIM["paddle/dataset/mnist.py"] = '''
"""MNIST: float32 [784] images in [-1, 1], int labels 0..9; each class has its own template."""
import numpy as np
from .common import capped, sizes, rng

_T = np.random.RandomState(28).uniform(-1, 1, size=(10, 784)).astype("float32")


def _reader(part):
    n = sizes("mnist", train=60000, test=10000)[part]

    def reader():
        r = rng("mnist", part)
        for _ in range(n):
            label = int(r.randint(10))
            img = np.clip(_T[label] + r.normal(0, 0.6, 784), -1, 1).astype("float32")
            yield img, label
    return capped("mnist", reader)


def train():
    return _reader("train")


def test():
    return _reader("test")
'''

SHIM["paddle/dataset/cifar.py"] = '''
"""CIFAR: float32 [3072] images (CHW) in [0, 1], int labels; each class has its own template."""
import numpy as np
from .common import capped, sizes, rng


def _reader(part, classes):
    n = sizes("cifar", train=50000, test=10000)[part]
    t = np.random.RandomState(32 + classes).uniform(0, 1, size=(classes, 3072)).astype("float32")

    def reader():
        r = rng("cifar", part)
        for _ in range(n):
            label = int(r.randint(classes))
            yield np.clip(t[label] + r.normal(0, 0.25, 3072), 0, 1).astype("float32"), label
    return capped("cifar", reader)


def train10(cycle=False):
    return _reader("train", 10)


def test10(cycle=False):
    return _reader("test", 10)


def train100():
    return _reader("train", 100)


def test100():
    return _reader("test", 100)
'''

SHIM["paddle/dataset/imikolov.py"] = '''
"""imikolov (PTB): build_dict gives word -> id (with <s>, <e>, <unk>); n-grams of ids drawn with
text-like (Zipf) frequencies, whose last word repeats the one before it half of the time."""
import numpy as np
from .common import capped, sizes, rng, zipf


class DataType(object):
    NGRAM = 1
    SEQ = 2


def _vocab():
    return sizes("imikolov", vocab=2074)["vocab"]   # the real dictionary (min_word_freq=50): 2074


def build_dict(min_word_freq=50):
    v = _vocab()
    words = ["w%d" % i for i in range(v - 3)] + ["<s>", "<e>", "<unk>"]
    return {w: i for i, w in enumerate(words)}


def _reader(part, word_idx, n, data_type):
    count = sizes("imikolov", train=42068 * 5, test=3761 * 5)[part]
    v = len(word_idx)

    def reader():
        r = rng("imikolov", part)
        if data_type == DataType.NGRAM:
            for _ in range(count):
                ids = [int(i) for i in zipf(r, v, n, s=0.9)]
                if r.rand() < 0.5:
                    ids[-1] = ids[-2]
                yield tuple(ids)
        else:
            for _ in range(count):
                length = r.randint(3, 30)
                ids = [int(i) for i in zipf(r, v, length)]
                yield [v - 3] + ids, ids + [v - 2]
    return capped("imikolov", reader)


def train(word_idx, n, data_type=DataType.NGRAM):
    return _reader("train", word_idx, n, data_type)


def test(word_idx, n, data_type=DataType.NGRAM):
    return _reader("test", word_idx, n, data_type)
'''

SHIM["paddle/dataset/movielens.py"] = '''
"""MovieLens 1M: [user id, gender, age index, job id, movie id, [category ids], [title word ids],
[rating]] with the real id ranges and dictionary sizes; ratings depend on the user and movie."""
import numpy as np
from .common import capped, sizes, rng

age_table = [1, 18, 25, 35, 45, 50, 56]
_CATEGORIES = ["Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
               "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi",
               "Thriller", "War", "Western"]
_TITLE_WORDS = 5174
_MAX_USER, _MAX_MOVIE, _MAX_JOB = 6040, 3952, 20


class MovieInfo(object):
    def __init__(self, index, categories, title):
        self.index, self.categories, self.title = int(index), categories, title

    def value(self):
        return [self.index, [_CATEGORIES.index(c) for c in self.categories],
                [int(w[1:]) for w in self.title.split()]]


class UserInfo(object):
    def __init__(self, index, gender, age, job_id):
        self.index, self.is_male, self.age, self.job_id = int(index), gender == "M", age_table.index(age), int(job_id)

    def value(self):
        return [self.index, 0 if self.is_male else 1, self.age, self.job_id]


def _movie(i):
    r = np.random.RandomState(i)
    cats = sorted(set(r.choice(len(_CATEGORIES), size=r.randint(1, 4))))
    title = " ".join("t%d" % w for w in r.randint(0, _TITLE_WORDS, size=r.randint(1, 7)))
    return MovieInfo(i, [_CATEGORIES[c] for c in cats], title)


def movie_categories():
    return {c: i for i, c in enumerate(_CATEGORIES)}


def get_movie_title_dict():
    return {"t%d" % i: i for i in range(_TITLE_WORDS)}


def max_movie_id():
    return _MAX_MOVIE


def max_user_id():
    return _MAX_USER


def max_job_id():
    return _MAX_JOB


def movie_info():
    return {i: _movie(i) for i in range(1, _MAX_MOVIE + 1)}


def user_info():
    r = np.random.RandomState(6040)
    return {i: UserInfo(i, "MF"[r.randint(2)], age_table[r.randint(7)], r.randint(_MAX_JOB + 1))
            for i in range(1, _MAX_USER + 1)}


def _reader(part):
    n = sizes("movielens", train=900188, test=100021)[part]

    def reader():
        r = rng("movielens", part)
        for _ in range(n):
            uid, mid = int(r.randint(1, _MAX_USER + 1)), int(r.randint(1, _MAX_MOVIE + 1))
            gender, age, job = uid % 2, uid % 7, uid % (_MAX_JOB + 1)
            m = _movie(mid)
            rating = float(1 + (uid % 5 + mid % 5 + len(m.categories)) % 5)
            yield [uid, gender, age, job] + m.value() + [[rating]]
    return capped("movielens", reader)


def train():
    return _reader("train")


def test():
    return _reader("test")
'''

SHIM["paddle/dataset/imdb.py"] = '''
"""IMDB: (word ids of a review, label 0/1); word_dict has the real size (5147 with <unk>) and the
words the chapter's inference looks up; the label follows which half of the ids dominate."""
import numpy as np
from .common import capped, sizes, rng, lengths, zipf

_KNOWN = ["the", "a", "is", "this", "movie", "book", "read", "forget", "great", "very", "bad"]
_SIZE = 5147


def word_dict(cutoff=150):
    words = _KNOWN + ["w%d" % i for i in range(_SIZE - 1 - len(_KNOWN))] + ["<unk>"]
    return {w: i for i, w in enumerate(words)}


def _reader(part, word_idx):
    cfg = sizes("imdb", train=25000, test=25000, len=[10, 300])
    v = len(word_idx)

    def reader():
        r = rng("imdb", part)
        for n in lengths(r, cfg[part], cfg["len"]):
            label = int(r.randint(2))
            ids = zipf(r, v - 1, n)
            mood = r.randint(0, (v - 1) // 2, size=n) * 2 + label   # ids whose parity is the label
            pick = r.rand(n) < 0.3
            ids = np.where(pick, mood, ids)
            yield [int(i) for i in ids], label
    return capped("imdb", reader)


def train(word_idx):
    return _reader("train", word_idx)


def test(word_idx):
    return _reader("test", word_idx)
'''

SHIM["paddle/dataset/conll05.py"] = '''
"""CoNLL-05 SRL: (word, ctx_n2, ctx_n1, ctx_0, ctx_p1, ctx_p2, predicate, mark, label) id lists
of one sentence each; dictionaries of the real sizes (words 44068, verbs 3162, labels 59); the
embedding file Paddle's reader downloads (16-byte header, float32 [44068, 32])."""
import os, tempfile
import numpy as np
from .common import capped, sizes, rng, lengths, zipf

_WORDS, _VERBS, _LABELS = 44068, 3162, 59


def get_dict():
    word_dict = {"w%d" % i: i for i in range(_WORDS - 1)}
    word_dict["<unk>"] = _WORDS - 1
    verb_dict = {"v%d" % i: i for i in range(_VERBS)}
    labels = ["O", "B-V"] + ["%s-A%d" % (bi, k) for k in range((_LABELS - 2) // 2) for bi in "BI"]
    labels += ["I-V"] * (_LABELS - len(labels))
    label_dict = {l: i for i, l in enumerate(labels[:_LABELS])}
    label_dict.update({"L%d" % i: i for i in range(len(label_dict), _LABELS)})
    return word_dict, verb_dict, label_dict


def get_embedding():
    path = os.path.join(tempfile.gettempdir(), "book_conll05_emb_%d" % os.getpid())
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(b"\\0" * 16)
            np.random.RandomState(5).normal(0, 0.1, (_WORDS, 32)).astype("float32").tofile(f)
    return path


def _reader(part):
    cfg = sizes("conll05", train=5267, test=5267, len=[5, 60])

    def reader():
        r = rng("conll05", part)
        for n in lengths(r, cfg[part], cfg["len"]):
            words = [int(i) for i in zipf(r, _WORDS, n)]
            p = int(r.randint(n))
            ctx = [words[min(max(p + k, 0), n - 1)] for k in (-2, -1, 0, 1, 2)]
            mark = [1 if abs(i - p) <= 1 else 0 for i in range(n)]
            label = [1 if i == p else (2 + (words[i] % 8) if mark[i] else 0) for i in range(n)]
            verb = int(r.randint(_VERBS))
            yield (words, [ctx[0]] * n, [ctx[1]] * n, [ctx[2]] * n, [ctx[3]] * n, [ctx[4]] * n,
                   [verb] * n, mark, label)
    return capped("conll05", reader)


def test():
    return _reader("test")


def train():
    return _reader("train")
'''

_WMT_COMMON = '''
import numpy as np
from .common import capped, sizes, rng, lengths

START, END, UNK = 0, 1, 2


def _pairs(name, part, src_size, trg_size):
    cfg = sizes(name, train=29000, test=1000, validation=1014, len=[4, 50])

    def reader():
        r = rng(name, part)
        for n in lengths(r, cfg[part], cfg["len"]):
            words = r.randint(3, src_size, size=n)
            trg = [int(3 + (w * 31 + 7) % (trg_size - 3)) for w in words[::-1]]
            yield [START] + [int(w) for w in words] + [END], [START] + trg, trg + [END]
    return capped(name, reader)


def _words(size, prefix):
    return ["<s>", "<e>", "<unk>"] + ["%s%d" % (prefix, i) for i in range(3, size)]
'''

SHIM["paddle/dataset/wmt16.py"] = _WMT_COMMON + '''
"""WMT16 en-de: (source ids with <s> ... <e>, <s> + target ids, target ids + <e>); the dictionary
sizes are the script's; the target is a function of the reversed source."""


def train(src_dict_size, trg_dict_size, src_lang="en"):
    return _pairs("wmt16", "train", src_dict_size, trg_dict_size)


def test(src_dict_size, trg_dict_size, src_lang="en"):
    return _pairs("wmt16", "test", src_dict_size, trg_dict_size)


def validation(src_dict_size, trg_dict_size, src_lang="en"):
    return _pairs("wmt16", "validation", src_dict_size, trg_dict_size)


def get_dict(lang, dict_size, reverse=False):
    words = _words(dict_size, lang)
    return dict(enumerate(words)) if reverse else {w: i for i, w in enumerate(words)}
'''

SHIM["paddle/dataset/wmt14.py"] = _WMT_COMMON + '''
"""WMT14 fr-en, the same structure as wmt16's readers."""


def train(dict_size):
    return _pairs("wmt14", "train", dict_size, dict_size)


def test(dict_size):
    return _pairs("wmt14", "test", dict_size, dict_size)


def gen(dict_size):
    return _pairs("wmt14", "test", dict_size, dict_size)


def get_dict(dict_size, reverse=True):
    src, trg = _words(dict_size, "fr"), _words(dict_size, "en")
    if reverse:
        return dict(enumerate(src)), dict(enumerate(trg))
    return {w: i for i, w in enumerate(src)}, {w: i for i, w in enumerate(trg)}
'''

# ``six`` (a Paddle 1.x dependency the scripts import), when the environment has none: the part the
# book uses.
SIX = '''
"""The part of six the book's scripts use (this environment has no six)."""
import sys, types
PY2, PY3 = False, True
string_types, integer_types, class_types, text_type, binary_type = (str,), (int,), (type,), str, bytes


def b(s):
    return s.encode("latin-1")


def u(s):
    return s


def iteritems(d, **kw):
    return iter(d.items(**kw))


def iterkeys(d, **kw):
    return iter(d.keys(**kw))


def itervalues(d, **kw):
    return iter(d.values(**kw))


moves = types.ModuleType("six.moves")
moves.xrange = moves.range = range
moves.zip, moves.map, moves.filter, moves.input = zip, map, filter, input
moves.reduce = __import__("functools").reduce
moves.cPickle = __import__("pickle")
sys.modules["six.moves"] = moves
'''

# The child: instruments fluidjax, runs the script as __main__, writes its record (BOOK_REPORT).
SHIM["book_child.py"] = '''
import ast, json, os, resource, sys, time, traceback

script, args = sys.argv[1], sys.argv[2:]
overrides = json.loads(os.environ.get("BOOK_OVERRIDES", "{}"))
shim = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [shim, os.path.dirname(os.path.abspath(script))] + [p for p in sys.path[1:] if p != shim]
# A Python the script starts (a Fluid dataset's pipe command "python dataset_generator.py") is this
# interpreter and imports the same paddle package.
os.environ["PYTHONPATH"] = shim
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

import paddle                                       # the shim: fluidjax before anything else
import fluidjax
import numpy as np

record = {"runs": [], "events": [], "error": None, "exit": None, "overrides": overrides}
OPTIMIZER_OPS = {"sgd", "adam", "adamw", "adagrad", "momentum", "rmsprop", "adamax", "lamb",
                 "lars_momentum", "ftrl", "decayed_adagrad", "adadelta", "dpsgd"}
_kinds = {}


def _kind(program):
    program = getattr(program, "_program", program) or fluidjax.default_main_program()
    key = (id(program), len(program.global_block().ops))
    if key not in _kinds:
        types = {op.type for block in program.blocks for op in block.ops}
        _kinds[key] = ("train" if types & OPTIMIZER_OPS else "run", id(program))
    return _kinds[key]


def _value(out):
    try:
        first = out[0]
        a = np.asarray(first, dtype="float64")
        return float(a.mean()) if a.size else None
    except Exception:
        return None



def _stub(name):
    def stub(*a, **k):
        record["stubbed"][name] = record["stubbed"].get(name, 0) + 1
    stub.__name__ = name
    return stub


# BOOK_STUBS: environment checks fluidjax lacks (fluid.require_version), given a no-op stand-in so
# a script that calls them gets further; each stand-in's calls are recorded (a gap, not hidden).
record["stubbed"] = {}
for _name in filter(None, os.environ.get("BOOK_STUBS", "").split(",")):
    if not hasattr(fluidjax, _name):
        setattr(fluidjax, _name, _stub(_name))
        record["stubbed"][_name] = 0

_run = fluidjax.Executor.run


def run(self, program=None, feed=None, fetch_list=None, *a, **k):
    kind, prog = _kind(program)
    start = time.perf_counter()
    out = _run(self, program, feed, fetch_list, *a, **k)
    value = _value(out) if fetch_list else None       # reading the value waits for the step
    seconds = time.perf_counter() - start
    record["runs"].append({"kind": kind, "program": prog, "s": round(seconds, 5), "value": value,
                           "after_load": any(e[0].startswith("load") for e in record["events"])})
    return out


fluidjax.Executor.run = run

for _name in ("save_inference_model", "load_inference_model", "save_params", "load_params",
              "save_persistables", "load_persistables"):
    def _wrap(fn, name):
        def call(*a, **k):
            out = fn(*a, **k)
            record["events"].append([name, len(record["runs"])])
            return out
        return call
    setattr(fluidjax.io, _name, _wrap(getattr(fluidjax.io, _name), _name))


def _finish():
    record["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    with open(os.environ["BOOK_REPORT"], "w") as f:
        json.dump(record, f)


class _Override(ast.NodeTransformer):
    """Module-level NAME = constant assignments named in BOOK_OVERRIDES get the given value."""
    def __init__(self):
        self.depth = 0

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Assign(self, node):
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \\
                and node.targets[0].id in overrides:
            node.value = ast.copy_location(ast.Constant(overrides[node.targets[0].id]), node.value)
        return node

    def visit_Call(self, node):
        # "func(kw=...)" keys: a keyword argument of a module-level call (a literal in
        # ``main(num_passes=2000)`` under ``if __name__ == "__main__"``)
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        for kw in node.keywords:
            key = "%s(%s=...)" % (name, kw.arg)
            if key in overrides:
                kw.value = ast.copy_location(ast.Constant(overrides[key]), kw.value)
        self.generic_visit(node)
        return node


class TimedOut(BaseException):
    """The runner's timeout (SIGTERM): raised where the script was, so the record says where."""


def _on_term(signum, frame):
    raise TimedOut("the runner's timeout ended the script here")


import signal                                       # noqa: E402
signal.signal(signal.SIGTERM, _on_term)
# The script's own files: its folder, or BOOK_SCRIPT_ROOT (a model folder whose helpers sit above).
SCRIPT_ROOT = os.path.abspath(os.environ.get("BOOK_SCRIPT_ROOT") or os.path.dirname(os.path.abspath(script)))
FLUIDJAX_ROOT = os.path.dirname(os.path.abspath(fluidjax.__file__))


def _where(f):
    path = os.path.abspath(f.filename)
    shown = ("fluidjax/" + os.path.relpath(path, FLUIDJAX_ROOT) if path.startswith(FLUIDJAX_ROOT + os.sep)
             else os.path.relpath(path))
    return "%s:%d: %s" % (shown, f.lineno, (f.line or "").strip())


def _ops_built():
    """Ops of the largest program the script built (scripts often build their own Programs)."""
    import gc
    try:
        programs = [o for o in gc.get_objects() if isinstance(o, fluidjax.Program)]
        return max([sum(len(b.ops) for b in p.blocks) for p in programs] or [0])
    except Exception:
        return None


sys.argv = [script] + args
glb = {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__}
try:
    source = open(script).read()
    tree = ast.parse(source, script)
    if overrides:
        tree = ast.fix_missing_locations(_Override().visit(tree))
    code = compile(tree, script, "exec")
    exec(code, glb)
except SystemExit as exc:
    record["exit"] = exc.code if isinstance(exc.code, (int, type(None))) else str(exc.code)
except BaseException as exc:
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.filename:        # the offending line has no frame
        frames.append(traceback.FrameSummary(exc.filename, exc.lineno or 0, None,
                                             line=(exc.text or "").strip()))
    mine = [f for f in frames if os.path.abspath(f.filename).startswith(SCRIPT_ROOT + os.sep)]
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(FLUIDJAX_ROOT + os.sep)]
    record["error"] = {"type": type(exc).__name__, "message": str(exc)[:1500],
                       "script_line": _where(mine[-1]) if mine else None,
                       "fluidjax_line": _where(ours[-1]) if ours else None,
                       "innermost": _where(frames[-1]) if frames else None,
                       "ops_built": _ops_built(),
                       "traceback": "".join(traceback.format_exception(exc))[-6000:]}
finally:
    _finish()
if record["error"]:
    sys.exit(1)
'''


def write_shim(directory: str, python: str, extra: dict | None = None) -> str:
    """Write the generated ``paddle`` package, the child and (if missing) six into ``directory``;
    ``extra`` (relative path -> text) adds or replaces files (the corpus runner's own modules)."""
    files = dict(SHIM)
    files.update(extra or {})
    if subprocess.run([python, "-c", "import six"], capture_output=True).returncode:
        files["six.py"] = SIX
    for rel, text in files.items():
        path = os.path.join(directory, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text).lstrip("\n"))
    return directory


# -- the parent -------------------------------------------------------------------------------------
def summarize(rec: dict) -> dict:
    """Training steps per program with first -> last values, saves, loads, inference runs."""
    trains: dict[int, list] = {}
    for r in rec["runs"]:
        if r["kind"] == "train":
            trains.setdefault(r["program"], []).append(r)
    out = {"programs": []}
    for runs in trains.values():
        values = [r["value"] for r in runs if r["value"] is not None]
        k = max(1, min(5, len(values) // 4))          # first and last: means of a few steps
        times = sorted(r["s"] for r in runs[1:]) or [runs[0]["s"]]
        out["programs"].append({"steps": len(runs), "mean_of": k,
                                "first": sum(values[:k]) / k if values else None,
                                "last": sum(values[-k:]) / k if values else None,
                                "first_step_s": runs[0]["s"], "step_s": times[len(times) // 2]})
    names = [e[0] for e in rec["events"]]
    out["saves"] = {n: names.count(n) for n in names if n.startswith("save")}
    out["loads"] = {n: names.count(n) for n in names if n.startswith("load")}
    out["infer_runs"] = sum(1 for r in rec["runs"] if r["after_load"] and r["kind"] != "train")
    return out


def _fmt(x) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}"


def run_script(book: str, spec: dict, shim: str, python: str, timeout: float, log_dir: str) -> dict:
    """Run one script (``spec``: name, path under ``book``; optional args, env, data, overrides,
    cwd and root, both under ``book``: the working directory, default the script's folder, and the
    folder whose files count as the script's own in its traceback) in a child; its record.

    At the timeout the child gets SIGTERM (it records where it was), 30 s later SIGKILL."""
    script = os.path.join(book, spec["path"])
    report = os.path.join(log_dir, spec["name"] + ".json")
    log = os.path.join(log_dir, spec["name"] + ".log")
    cwd = os.path.join(book, spec["cwd"]) if spec.get("cwd") else os.path.dirname(script)
    env = dict(os.environ, BOOK_REPORT=report, BOOK_DATA=json.dumps(spec.get("data", {})),
               BOOK_OVERRIDES=json.dumps(spec.get("overrides", {})), PYTHONUNBUFFERED="1",
               MPLBACKEND="Agg", **spec.get("env", {}))
    if spec.get("root"):
        env["BOOK_SCRIPT_ROOT"] = os.path.join(book, spec["root"])
    env.pop("PYTHONPATH", None)
    if os.path.exists(report):
        os.remove(report)
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([python, os.path.join(shim, "book_child.py"), script, *spec.get("args", [])],
                                cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            rc = "timeout"
    wall = time.perf_counter() - start
    result = {"name": spec["name"], "rc": rc, "wall_s": round(wall, 1), "log": log, "batch": spec.get("batch"),
              "overrides": spec.get("overrides", {}), "data": spec.get("data", {})}
    if os.path.exists(report):
        with open(report) as f:
            rec = json.load(f)
        result.update(summarize(rec), error=rec["error"], exit=rec["exit"], peak_rss_mb=rec.get("peak_rss_mb"),
                      stubbed=rec.get("stubbed", {}))
    else:
        with open(log) as f:
            result["error"] = {"type": "no record", "message": f.read()[-1500:], "script_line": None,
                               "innermost": None}
    return result


def describe(r: dict) -> str:
    lines = [f"== {r['name']}  (batch {r['batch']}, {r['wall_s']} s, peak RSS {r.get('peak_rss_mb')} MB, "
             f"rc {r['rc']})" + (f"  overrides {r['overrides']}" if r["overrides"] else "")]
    for p in r.get("programs", []):
        lines.append(f"   trains: {p['steps']} steps, {_fmt(p['first'])} -> {_fmt(p['last'])} "
                     f"(means of {p['mean_of']}) "
                     f"(first step {p['first_step_s']:.1f} s, then median {p['step_s'] * 1e3:.1f} ms)")
    if not r.get("programs"):
        lines.append("   trains: no training step ran")
    lines.append(f"   saves: {r.get('saves') or '-'}  loads: {r.get('loads') or '-'}  "
                 f"inference runs after a load: {r.get('infer_runs', 0)}")
    if r.get("exit") not in (None, 0):
        lines.append(f"   sys.exit({r['exit']!r})")
    err = r.get("error")
    if err:
        lines.append(f"   FAILED: {err['type']}: {err['message'].splitlines()[0] if err['message'] else ''}"[:400])
        if err.get("script_line"):
            lines.append(f"     at {err['script_line']}")
        if err.get("fluidjax_line") and err["fluidjax_line"] != err.get("innermost"):
            lines.append(f"     in fluidjax {err['fluidjax_line']}")
        if err.get("innermost"):
            lines.append(f"     innermost {err['innermost']}")
    elif r["rc"] == "timeout":
        lines.append("   FAILED: timed out")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("book", help="folder holding the book's chapters (01.fit_a_line/, ...)")
    ap.add_argument("--only", action="append", help="run only these (names: " +
                    ", ".join(s["name"] for s in SCRIPTS) + ")")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per script")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--logs", default=None, help="folder for logs and records (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write every result here")
    ns = ap.parse_args(argv)
    specs = [s for s in SCRIPTS if not ns.only or s["name"] in ns.only]
    unknown = set(ns.only or ()) - {s["name"] for s in SCRIPTS}
    if unknown:
        ap.error(f"unknown script names: {sorted(unknown)}")
    logs = ns.logs or tempfile.mkdtemp(prefix="book_logs_")
    os.makedirs(logs, exist_ok=True)
    shim = write_shim(tempfile.mkdtemp(prefix="book_shim_"), ns.python)
    results = []
    try:
        for spec in specs:
            r = run_script(os.path.abspath(ns.book), spec, shim, ns.python, ns.timeout, logs)
            results.append(r)
            print(describe(r), flush=True)
    finally:
        shutil.rmtree(shim, ignore_errors=True)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(results, f, indent=1)
    failed = [r["name"] for r in results if r.get("error") or r["rc"] not in (0,)]
    print(f"\n{len(results) - len(failed)} of {len(results)} ran to the end; logs in {logs}"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
