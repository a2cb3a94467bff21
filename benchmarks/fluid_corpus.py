"""Run PaddlePaddle/models' static-graph Fluid 1.x model scripts, text untouched, on fluidjax.

    python benchmarks/fluid_corpus.py prepare --git MODELS_GIT_DIR --out /work/corpus   # once
    FLUID_CORPUS=/work/corpus python benchmarks/fluid_corpus.py                        # every script
    python benchmarks/fluid_corpus.py --corpus /work/corpus --only ic_resnet50 -j 2 --markdown t.md

**The corpus** is not part of this repository. ``prepare`` extracts it from a git directory of
PaddlePaddle/models (``git clone --bare https://github.com/PaddlePaddle/models``) into three trees:

- ``fluid14/fluid``: the ``fluid/`` folder at its last 1.x-layout commit (b014ae2, the parent of
  43cdafbb9 "Adjust whole models structure", April 2019, Fluid 1.3/1.4): DeepASR, DeepQNetwork,
  policy_gradient, and the PaddleCV/PaddleNLP/PaddleRec models of that time;
- ``r15``: PaddleCV, PaddleNLP, PaddleRec of ``release/1.5`` (SSD, YOLOv3, R-CNN, ICNet,
  DeepLabv3+ still live here; in 1.6+ they moved to the PaddleDetection/PaddleSeg submodules);
- ``r18``: PaddleCV, PaddleNLP, PaddleRec, PaddleSpeech/DeepASR of ``release/1.8``.

Images, archives and files over 2 MB are left out.

**How a script runs** is ``book_scripts.py``'s machinery: its own subprocess (``nice``d as the
parent), its folder as working directory, a generated ``paddle`` package first on ``sys.path``
(``paddle.fluid`` and every ``paddle.fluid.*`` path = fluidjax's, ``paddle.dataset.*`` small
synthetic readers; ``benchmarks/corpus_shim/`` adds ``paddle.compat``, ``paddle.dataset.image``, a
Pillow-backed ``cv2``, ``pycocotools.coco``, ``wget`` (refuses downloads), ``paddlehub`` (imports; any
use raises) and a synthetic
``gym`` + ``atari_py`` game).
Sizes and steps are set through the scripts' own flags (epochs, batch size, step caps, tiny
hidden sizes); where a script reads data files, the runner writes small synthetic files of the
real format into a scratch folder and points the script's flags at them (``DATA``); a script
whose data it does not synthesize fails where it opens its data, reported as such.

Per script: ran to the end or the first error (the innermost frame in the script's folder and in
fluidjax, and the message), training steps with the first -> last fetched loss, wall time, peak
RSS; and a classification of the failure (``classify``): the script's own (Python 2 syntax,
NumPy 2's removed aliases, a third-party module this environment lacks, data not supplied or a
download) apart from fluidjax's (missing module path or name, keyword, op missing, shape rule,
feed, LoD, not offered, ...). ``--markdown`` writes the table that ``docs/fluid1.md`` shows.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import book_scripts  # noqa: E402  (the shared machinery: shim, child, run_script, summarize)

PREPARE = [  # (tree, commit or ref, paths)
    ("fluid14", "43cdafbb9^", ["fluid"]),
    ("r15", "release/1.5", ["PaddleCV", "PaddleNLP", "PaddleRec"]),
    ("r18", "release/1.8", ["PaddleCV", "PaddleNLP", "PaddleRec", "PaddleSpeech/DeepASR"]),
]


def prepare(git_dir: str, out: str) -> None:
    """Extract the corpus trees (PREPARE) from a git directory of PaddlePaddle/models into ``out``."""
    skip = (".png", ".jpg", ".jpeg", ".gif", ".pdf", ".JPEG", ".tar", ".gz", ".zip")
    for tree, ref, paths in PREPARE:
        listing = subprocess.run(["git", "-C", git_dir, "ls-tree", "-r", "-l", "-z", ref, "--", *paths],
                                 capture_output=True, check=True).stdout.decode().split("\0")
        count = 0
        for entry in filter(None, listing):
            meta, path = entry.split("\t", 1)
            _, kind, obj, size = meta.split()
            if kind != "blob" or size == "-" or int(size) > 2_000_000 or path.endswith(skip):
                continue
            blob = subprocess.run(["git", "-C", git_dir, "cat-file", "blob", obj], capture_output=True)
            if blob.returncode:
                continue                                   # absent from a partial clone
            dest = os.path.join(out, tree, path)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(blob.stdout)
            count += 1
        print(f"{tree}: {count} files from {ref}")


# -- synthetic data of the real formats -----------------------------------------------------------
def _rng(name):
    import numpy as np
    return np.random.RandomState(sum(map(ord, name)) % 10007)


def data_imagenet(d: str) -> None:
    """ImageNet layout: train_list.txt / val_list.txt ("relative/path.jpg label"), 10 classes of
    48x48 JPEGs whose colour depends on the label."""
    import numpy as np
    from PIL import Image
    r = _rng("imagenet")
    for part, n in (("train", 24), ("val", 8)):
        os.makedirs(os.path.join(d, part), exist_ok=True)
        with open(os.path.join(d, f"{part}_list.txt"), "w") as f:
            for i in range(n):
                label = i % 10
                img = np.clip(r.normal(25 * label, 30, (48, 48, 3)), 0, 255).astype("uint8")
                Image.fromarray(img).save(os.path.join(d, part, f"{i}.jpg"))
                f.write(f"{part}/{i}.jpg {label}\n")


def data_word2vec(d: str) -> None:
    """word2vec: a dictionary file ("word count" lines) and a folder of id-sequence text files
    (the preprocessed form the reader expects: space-separated word ids per line)."""
    r = _rng("w2v")
    os.makedirs(os.path.join(d, "text"), exist_ok=True)
    with open(os.path.join(d, "dict"), "w") as f:
        for i in range(200):
            f.write(f"w{i} {1000 // (i + 1) + 5}\n")
    with open(os.path.join(d, "text", "part-0"), "w") as f:
        for _ in range(60):
            f.write(" ".join(str(int(x)) for x in r.zipf(1.3, 20) % 200) + "\n")


def data_criteo(d: str) -> None:
    """Criteo: raw lines (label, 13 integer features, 26 hashed categorical features, tab-separated;
    each categorical column draws from 12 values) in train_data/ test_data/, and the statistics the
    CTR models' preprocessing writes: DCN's cat_feature_num.txt ("C1 12"), int_feature_minmax.txt
    and vocab/C1.txt ... (one value a line); DeepFM's aid_data/feat_dict_10.pkl2 (a pickled dict:
    integer column 1..13 and categorical value -> feature id, ids < 1000); xDeepFM's preprocessed
    lines ("label\tid1 ... id39" tab-separated, ids < 1000) in ids_train/ ids_test/."""
    import pickle
    r = _rng("criteo")
    pools = [["%08x" % x for x in r.randint(0, 2 ** 31, 12)] for _ in range(26)]
    rows = {}
    for part in ("train_data", "test_data"):
        os.makedirs(os.path.join(d, part), exist_ok=True)
        rows[part] = []
        with open(os.path.join(d, part, "part-0"), "w") as f:
            for _ in range(64):
                dense = [str(int(x)) if r.rand() > 0.1 else "" for x in r.randint(0, 50, 13)]
                cats = [pool[r.randint(12)] if r.rand() > 0.1 else "" for pool in pools]
                row = [str(int(r.rand() < 0.3))] + dense + cats
                rows[part].append(row)
                f.write("\t".join(row) + "\n")
    os.makedirs(os.path.join(d, "vocab"), exist_ok=True)
    with open(os.path.join(d, "cat_feature_num.txt"), "w") as f:
        for i, pool in enumerate(pools):
            f.write(f"C{i + 1} {len(pool)}\n")
            with open(os.path.join(d, "vocab", f"C{i + 1}.txt"), "w") as v:
                v.write("\n".join(pool) + "\n")
    with open(os.path.join(d, "int_feature_minmax.txt"), "w") as f:
        f.write("".join(f"I{i + 1} 0 49\n" for i in range(13)))
    feat_dict = {i: i for i in range(1, 14)}
    for pool in pools:
        for value in pool:
            feat_dict.setdefault(value, len(feat_dict) + 1)
    os.makedirs(os.path.join(d, "aid_data"), exist_ok=True)
    with open(os.path.join(d, "aid_data", "feat_dict_10.pkl2"), "wb") as f:
        pickle.dump(feat_dict, f, protocol=2)
    for part, out in (("train_data", "ids_train"), ("test_data", "ids_test")):
        os.makedirs(os.path.join(d, out), exist_ok=True)
        with open(os.path.join(d, out, "part-0"), "w") as f:
            for row in rows[part]:
                ids = [str(feat_dict.get(x, 0)) for x in row[14:]] + [str(i + 1) for i in range(13)]
                f.write("\t".join([row[0]] + ids) + "\n")


def data_esmm(d: str) -> None:
    """ESMM (Ali-CCP sample skeleton): train_data/traindata.csv and test_data/testdata.csv lines
    "sample_id,click,buy,common_feature_index,field:feature_id,..." (ids < 1000; fields of the
    model's 23 and a few it ignores)."""
    r = _rng("esmm")
    fields = ['101', '109_14', '110_14', '127_14', '150_14', '121', '122', '124', '125', '126', '127', '128',
              '129', '205', '206', '207', '210', '216', '508', '509', '702', '853', '301', '999']
    for part, name in (("train_data", "traindata.csv"), ("test_data", "testdata.csv")):
        os.makedirs(os.path.join(d, part), exist_ok=True)
        with open(os.path.join(d, part, name), "w") as f:
            for i in range(48):
                click = int(r.rand() < 0.4)
                buy = int(click and r.rand() < 0.5)
                feats = [f"{fields[j]}:{int(r.randint(1, 1000))}" for j in r.randint(0, len(fields), 30)]
                f.write(f"{i},{click},{buy},c{i}," + ",".join(feats) + "\n")


def data_wide_deep(d: str) -> None:
    """Wide & deep (census adult, prepared): train_data.csv / test_data.csv with a header line,
    8 wide + 58 deep float features and the 0/1 label, comma-separated."""
    r = _rng("wide_deep")
    for part in ("train_data", "test_data"):
        with open(os.path.join(d, f"{part}.csv"), "w") as f:
            f.write(",".join([f"w{i}" for i in range(8)] + [f"d{i}" for i in range(58)] + ["label"]) + "\n")
            for _ in range(48):
                x = r.rand(66).round(4)
                f.write(",".join(map(str, x)) + f",{float(x[0] > 0.5)}\n")


def data_din(d: str) -> None:
    """DIN (Amazon Electronics, prepared): config.txt (user, item, category counts, one a line) and
    paddle_train.txt / paddle_test.txt lines "hist items;hist categories;target item;target category;label"."""
    r = _rng("din")
    items, cats = 60, 8
    with open(os.path.join(d, "config.txt"), "w") as f:
        f.write(f"30\n{items}\n{cats}\n")
    for part in ("train", "test"):
        with open(os.path.join(d, f"paddle_{part}.txt"), "w") as f:
            for _ in range(48):
                n = int(r.randint(1, 8))
                hist = r.randint(1, items, n)
                target = int(r.randint(1, items))
                f.write(" ".join(map(str, hist)) + ";" + " ".join(str(i % cats) for i in hist) +
                        f";{target};{target % cats};{int(r.rand() < 0.5)}\n")


def data_ncf(d: str) -> None:
    """NCF (MovieLens-1M, prepared): ml-1m.test.rating ("user\titem\trating\ttime"),
    ml-1m.test.negative ("(user,item)\tneg1\t..."), train_data.csv ("user,item,label"); 60 users, 100 items."""
    r = _rng("ncf")
    with open(os.path.join(d, "ml-1m.test.rating"), "w") as fr, \
            open(os.path.join(d, "ml-1m.test.negative"), "w") as fn:
        for u in range(60):
            i = int(r.randint(100))
            fr.write(f"{u}\t{i}\t5\t978824291\n")
            fn.write(f"({u},{i})\t" + "\t".join(str(int(j)) for j in r.randint(0, 100, 20)) + "\n")
    with open(os.path.join(d, "train_data.csv"), "w") as f:
        for _ in range(80):
            f.write(f"{int(r.randint(60))},{int(r.randint(100))},{int(r.rand() < 0.2)}\n")


def data_gnn(d: str) -> None:
    """Session GNN (diginetica, prepared): diginetica/config.txt (the item count) and
    diginetica/train.txt / test.txt, each a pickled pair (sessions: lists of item ids 1..49,
    targets: item ids 1..50), as the model's preprocessing writes them."""
    import pickle
    r = _rng("gnn")
    os.makedirs(os.path.join(d, "diginetica"), exist_ok=True)
    with open(os.path.join(d, "diginetica", "config.txt"), "w") as f:
        f.write("50\n")
    for part in ("train", "test"):
        seqs = [[int(x) for x in r.randint(1, 50, int(r.randint(1, 6)))] for _ in range(40)]
        targets = [int(x) for x in r.randint(1, 51, 40)]
        with open(os.path.join(d, "diginetica", f"{part}.txt"), "wb") as f:
            pickle.dump((seqs, targets), f, protocol=2)


def data_gru4rec(d: str) -> None:
    """GRU4Rec (RSC15 sessions, prepared): train/part-0 with 8 sessions of item ids (space-separated,
    one session a line, ids 1..500) and vocab.txt (the vocabulary size, 501)."""
    r = _rng("gru4rec")
    os.makedirs(os.path.join(d, "train"), exist_ok=True)
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("501\n")
    with open(os.path.join(d, "train", "part-0"), "w") as f:
        for _ in range(8):
            f.write(" ".join(str(int(i)) for i in r.randint(1, 501, int(r.randint(3, 7)))) + " \n")


def data_mmoe(d: str) -> None:
    """MMoE (census income, prepared): train_data/train_data.csv and test_data/test_data.csv with a
    header, "marital_stat,income_50k," then 20 float features."""
    r = _rng("mmoe")
    for part in ("train_data", "test_data"):
        os.makedirs(os.path.join(d, part), exist_ok=True)
        with open(os.path.join(d, part, f"{part}.csv"), "w") as f:
            f.write("marital_stat,income_50k," + ",".join(f"f{i}" for i in range(20)) + "\n")
            for _ in range(40):
                f.write(f"{int(r.rand() < 0.5)},{int(r.rand() < 0.3)}," + ",".join(map(str, r.rand(20).round(4))) + "\n")


def data_text_cls(d: str) -> None:
    """Sentiment / emotion classification: train.tsv, dev.tsv, test.tsv, infer.tsv ("label\\ttext"
    with a header line; text: space-separated words) and word_dict.txt (one word a line)."""
    r = _rng("senta")
    words = ["w%d" % i for i in range(300)]
    with open(os.path.join(d, "word_dict.txt"), "w") as f:
        f.write("\n".join(words + ["<unk>"]) + "\n")
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(f"{w}\t{i}" for i, w in enumerate(words + ["<unk>"])) + "\n")
    for part in ("train", "dev", "test", "infer"):
        with open(os.path.join(d, f"{part}.tsv"), "w") as f:
            f.write("label\ttext_a\n")
            for _ in range(48):
                label = int(r.randint(2))
                n = int(r.randint(4, 20))
                ids = r.randint(0, 150, n) * 2 + label
                f.write(f"{label}\t" + " ".join(words[i] for i in ids) + "\n")


def data_senta(d: str) -> None:
    """Sentiment classification (ChnSentiCorp layout): the same files with "text_a\tlabel" lines
    (text first, a header line)."""
    data_text_cls(d)
    for part in ("train", "dev", "test", "infer"):
        path = os.path.join(d, f"{part}.tsv")
        with open(path) as f:
            rows = [ln.rstrip("\n").split("\t", 1) for ln in f][1:]
        with open(path, "w") as f:
            f.write("text_a\tlabel\n" + "".join(f"{t}\t{label}\n" for label, t in rows))


def data_ptb(d: str) -> None:
    """PTB (simple-examples/data/ptb.{train,valid,test}.txt): lines of words."""
    r = _rng("ptb")
    os.makedirs(d, exist_ok=True)
    for part, n in (("train", 120), ("valid", 20), ("test", 20)):
        with open(os.path.join(d, f"ptb.{part}.txt"), "w") as f:
            for _ in range(n):
                f.write(" " + " ".join("w%d" % i for i in r.zipf(1.3, int(r.randint(5, 20))) % 300) + " \n")
    # variational_seq2seq reads "<prefix>.vocab.txt" when it exists (else it builds one from the
    # training words): 199 words, its 4 specials first -> the --vocab_size 203 the runner passes
    with open(os.path.join(d, "ptb.vocab.txt"), "w") as f:
        f.write("".join("w%d\n" % i for i in range(199)))


def data_lac(d: str) -> None:
    """LAC (lexical analysis): train.tsv / test.tsv with a header, "chars joined by \\x02 \\t tags
    joined by \\x02"; the dictionaries are the model's own conf/ files."""
    r = _rng("lac")
    tags = ["n-B", "n-I", "v-B", "v-I", "O"]
    chars = [chr(0x4e00 + i) for i in range(200)]
    for part in ("train", "test", "infer"):
        with open(os.path.join(d, f"{part}.tsv"), "w") as f:
            f.write("text_a\tlabel\n")
            for _ in range(40):
                n = int(r.randint(3, 15))
                cs = [chars[i] for i in r.randint(0, 200, n)]
                ts = [tags[i] for i in r.randint(0, 5, n)]
                f.write("\x02".join(cs) + "\t" + "\x02".join(ts) + "\n")


def data_wmt(d: str) -> None:
    """Transformer / seq2seq: "source sentence\\ttarget sentence" BPE lines, a shared vocabulary
    with <s> <e> <unk> first; seq2seq's prefix files (train.vi/train.en, vocab.vi/vocab.en)."""
    r = _rng("wmt")
    words = ["<s>", "<e>", "<unk>"] + ["w%d" % i for i in range(200)]
    with open(os.path.join(d, "vocab.bpe"), "w") as f:
        f.write("\n".join(words) + "\n")
    for lang in ("vi", "en"):
        with open(os.path.join(d, f"vocab.{lang}"), "w") as f:
            f.write("\n".join(["<unk>", "<s>", "</s>"] + words[3:]) + "\n")
    pairs = []
    for _ in range(64):
        n = int(r.randint(3, 12))
        src = r.randint(3, 203, n)
        trg = [3 + (int(w) * 7) % 200 for w in src[::-1]]
        pairs.append((" ".join(words[i] for i in src), " ".join(words[i] for i in trg)))
    for part in ("train", "dev", "test", "tst2012", "tst2013"):
        with open(os.path.join(d, f"{part}.tok.bpe"), "w") as f:
            f.write("".join(f"{s}\t{t}\n" for s, t in pairs))
        # seq2seq's reader yields batches only from a full cache of batch_size x 20 pairs: 192 lines
        with open(os.path.join(d, f"{part}.vi"), "w") as fv, open(os.path.join(d, f"{part}.en"), "w") as fe:
            for s, t in pairs * 3:
                fv.write(s + "\n")
                fe.write(t + "\n")


def data_ocr(d: str) -> None:
    """OCR (ctc / attention): train_images/ of 48x384 grey JPEGs (the scripts declare pixel with
    fluid.data [None, 1, 48, 384], whose feeds Fluid 1.8 checks) and train.list lines
    "width height name label-ids(comma-separated)" (160 lines over 8 images: the reader's partial
    shuffle drops up to 100 lines); the same for test."""
    import numpy as np
    from PIL import Image
    r = _rng("ocr")
    for part in ("train", "test"):
        os.makedirs(os.path.join(d, f"{part}_images"), exist_ok=True)
        lines = []
        for i in range(8):
            n = 4      # one label length: each batch's LoD (hence the attention decoder's step) the same
            label = r.randint(0, 95, n)
            img = np.clip(r.normal(128, 60, (48, 384)), 0, 255).astype("uint8")
            Image.fromarray(img).save(os.path.join(d, f"{part}_images", f"{i}.jpg"))
            lines.append(f"384 48 {i}.jpg " + ",".join(map(str, label)) + "\n")
        with open(os.path.join(d, f"{part}.list"), "w") as f:
            f.write("".join(lines * 20))


def data_sop(d: str) -> None:
    """Stanford Online Products (metric learning): data/Stanford_Online_Products/Ebay_{train,test}.txt
    ("image_id class_id super_class_id path" with a header) and 48x48 JPEGs, 6 classes x 4 images."""
    import numpy as np
    from PIL import Image
    r = _rng("sop")
    root = os.path.join(d, "data", "Stanford_Online_Products")
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    for part, first in (("train", 1), ("test", 7)):
        with open(os.path.join(root, f"Ebay_{part}.txt"), "w") as f:
            f.write("image_id class_id super_class_id path\n")
            for i in range(24):
                label = first + i % 6
                img = np.clip(r.normal(30 * (label % 8), 30, (48, 48, 3)), 0, 255).astype("uint8")
                Image.fromarray(img).save(os.path.join(root, "img", f"{part}{i}.jpg"))
                f.write(f"{i + 1} {label} 1 img/{part}{i}.jpg\n")


def data_voc(d: str) -> None:
    """Pascal VOC (SSD): label_list (background first), trainval.txt / test.txt ("image annotation"
    per line), 120x100 JPEGs with one or two boxes each, VOC XML annotations."""
    import numpy as np
    from PIL import Image
    r = _rng("voc")
    names = ["background", "aeroplane", "bicycle", "bird", "boat", "bottle"]
    with open(os.path.join(d, "label_list"), "w") as f:
        f.write("\n".join(names) + "\n")
    os.makedirs(os.path.join(d, "img"), exist_ok=True)
    for part in ("trainval", "test"):
        with open(os.path.join(d, f"{part}.txt"), "w") as f:
            for i in range(8):
                img = np.full((100, 120, 3), 90, "uint8")
                objs = []
                for _ in range(1 + i % 2):
                    x0, y0 = int(r.randint(0, 70)), int(r.randint(0, 50))
                    x1, y1 = x0 + int(r.randint(20, 50)), y0 + int(r.randint(20, 50))
                    c = 1 + int(r.randint(5))
                    img[y0:y1, x0:x1] = 40 * c
                    objs.append(f"<object><name>{names[c]}</name><difficult>0</difficult><bndbox><xmin>{x0}</xmin>"
                                f"<ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>")
                Image.fromarray(img).save(os.path.join(d, "img", f"{part}{i}.jpg"))
                with open(os.path.join(d, "img", f"{part}{i}.xml"), "w") as x:
                    x.write(f"<annotation><size><width>120</width><height>100</height></size>{''.join(objs)}"
                            "</annotation>")
                f.write(f"img/{part}{i}.jpg img/{part}{i}.xml\n")


def data_coco(d: str) -> None:
    """COCO 2017 layout: annotations/instances_{train,val}2017.json (5 categories, boxes as
    [x, y, w, h], area, iscrowd 0, a polygon per box) and train2017/ val2017/ JPEGs (160x128).
    Each image has 3 or 4 boxes: one LoD bucket of ground truth (4 rows), so a few steps of the
    R-CNN scripts compile once (each new bucket of a LoD feed is a new compilation)."""
    import numpy as np
    from PIL import Image
    r = _rng("coco")
    os.makedirs(os.path.join(d, "annotations"), exist_ok=True)
    cats = [{"id": i + 1, "name": n, "supercategory": "x"}
            for i, n in enumerate(["person", "car", "dog", "cat", "bus"])]
    for part in ("train2017", "val2017"):
        os.makedirs(os.path.join(d, part), exist_ok=True)
        images, anns = [], []
        for i in range(8):
            img = np.full((128, 160, 3), 100, "uint8")
            for _ in range(3 + i % 2):
                x, y = int(r.randint(0, 100)), int(r.randint(0, 70))
                w, h = int(r.randint(20, 60)), int(r.randint(20, 58))
                c = 1 + int(r.randint(5))
                img[y:y + h, x:x + w] = 40 * c
                anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": c, "bbox": [x, y, w, h],
                             "area": w * h, "iscrowd": 0,
                             "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]]})
            Image.fromarray(img).save(os.path.join(d, part, f"{i + 1:012d}.jpg"))
            images.append({"id": i + 1, "file_name": f"{i + 1:012d}.jpg", "width": 160, "height": 128})
        with open(os.path.join(d, "annotations", f"instances_{part}.json"), "w") as f:
            json.dump({"images": images, "annotations": anns, "categories": cats}, f)


def data_cityscapes(d: str) -> None:
    """GAN image-to-image data (data_dir/cityscapes): trainA/ trainB/ testA/ testB/ 72x72 JPEGs,
    trainA.txt ... (one path a line: CycleGAN) and train.txt / test.txt ("a\tb" pairs: Pix2pix)."""
    import numpy as np
    from PIL import Image
    r = _rng("cityscapes")
    root = os.path.join(d, "cityscapes")
    for part in ("trainA", "trainB", "testA", "testB"):
        os.makedirs(os.path.join(root, part), exist_ok=True)
        with open(os.path.join(root, f"{part}.txt"), "w") as f:
            for i in range(4):
                img = np.clip(r.normal(120, 50, (72, 72, 3)), 0, 255).astype("uint8")
                Image.fromarray(img).save(os.path.join(root, part, f"{i}.jpg"))
                f.write(f"{part}/{i}.jpg\n")
    for part in ("train", "test"):
        with open(os.path.join(root, f"{part}.txt"), "w") as f:
            f.write("".join(f"{part}A/{i}.jpg\t{part}B/{i}.jpg\n" for i in range(4)))


def data_mnist_gz(d: str) -> None:
    """MNIST's idx files as the GAN scripts read them (data_dir/mnist/train-{images-idx3,labels-idx1}
    -ubyte.gz: big-endian headers, 28x28 uint8 images): 200 images, a multiple of the reader's 100."""
    import gzip
    import struct
    import numpy as np
    r = _rng("mnist_gz")
    root = os.path.join(d, "mnist")
    os.makedirs(root, exist_ok=True)
    n = 200
    labels = r.randint(0, 10, n).astype("uint8")
    images = np.clip(r.normal(30, 40, (n, 28, 28)) + 20 * labels[:, None, None], 0, 255).astype("uint8")
    for part in ("train", "t10k"):
        with gzip.open(os.path.join(root, f"{part}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        with gzip.open(os.path.join(root, f"{part}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 2049, n) + labels.tobytes())


CELEBA_ATTRS = ("5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose Black_Hair "
                "Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee Gray_Hair "
                "Heavy_Makeup High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard Oval_Face "
                "Pale_Skin Pointy_Nose Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair Wavy_Hair "
                "Wearing_Earrings Wearing_Hat Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young").split()


def data_celeba(d: str) -> None:
    """CelebA as the GAN scripts read it (data_dir/celeba): list_attr_celeba-style train.txt / test.txt
    (the count, the 40 attribute names, then "000001.jpg" and 40 values of 1/-1 per line) and
    img_align_celeba/ JPEGs (96x80), 12 images (the reader trains on the first 90%)."""
    import numpy as np
    from PIL import Image
    r = _rng("celeba")
    root = os.path.join(d, "celeba")
    os.makedirs(os.path.join(root, "img_align_celeba"), exist_ok=True)
    lines = []
    for i in range(12):
        name = f"{i + 1:06d}.jpg"
        img = np.clip(r.normal(120, 50, (96, 80, 3)), 0, 255).astype("uint8")
        Image.fromarray(img).save(os.path.join(root, "img_align_celeba", name))
        lines.append(name + " " + " ".join(r.choice(["1", "-1"], len(CELEBA_ATTRS))) + "\n")
    for part in ("train", "test"):
        with open(os.path.join(root, f"{part}.txt"), "w") as f:
            f.write(f"{len(lines)}\n" + " ".join(CELEBA_ATTRS) + "\n" + "".join(lines))


def data_wider(d: str) -> None:
    """WIDER FACE (face_detection): WIDER_train/images/<event>/<name>.jpg (160x160 with one or two
    large faces) and wider_face_split/wider_face_train_bbx_gt.txt (name, face count, then
    "x y w h blur expression illumination invalid occlusion pose" per face)."""
    import numpy as np
    from PIL import Image
    r = _rng("wider")
    event = "0--Parade"
    os.makedirs(os.path.join(d, "WIDER_train", "images", event), exist_ok=True)
    os.makedirs(os.path.join(d, "wider_face_split"), exist_ok=True)
    out = []
    for i in range(8):
        img = np.clip(r.normal(100, 30, (160, 160, 3)), 0, 255).astype("uint8")
        faces = []
        for _ in range(1 + i % 2):
            x, y, w, h = int(r.randint(10, 70)), int(r.randint(10, 70)), int(r.randint(40, 80)), int(r.randint(40, 80))
            img[y:y + h, x:x + w] = 200
            faces.append(f"{x} {y} {w} {h} 0 0 0 0 0 0")
        name = f"{event}/0_Parade_{i}.jpg"
        Image.fromarray(img).save(os.path.join(d, "WIDER_train", "images", name))
        out += [name, str(len(faces)), *faces]
    with open(os.path.join(d, "wider_face_split", "wider_face_train_bbx_gt.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


def data_simnet(d: str) -> None:
    """SimNet (similarity_net): vocab.txt ("word\tid" lines) and pairwise train.tsv
    ("query\tpositive title\tnegative title", no header): the positive shares the query's words."""
    r = _rng("simnet")
    words = ["w%d" % i for i in range(300)]
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("".join(f"{w}\t{i + 1}\n" for i, w in enumerate(words)))
    with open(os.path.join(d, "train_pairwise.tsv"), "w") as f:
        for _ in range(48):
            q = r.randint(0, 300, int(r.randint(3, 10)))
            pos = list(q[: max(1, len(q) // 2)]) + list(r.randint(0, 300, 2))
            neg = r.randint(0, 300, int(r.randint(3, 10)))
            f.write("\t".join(" ".join(words[i] for i in part) for part in (q, pos, neg)) + "\n")
    with open(os.path.join(d, "valid.tsv"), "w") as f:      # "query\ttitle\tlabel"
        for i in range(16):
            q = r.randint(0, 300, int(r.randint(3, 10)))
            t = list(q[:2]) if i % 2 else list(r.randint(0, 300, 4))
            f.write(" ".join(words[j] for j in q) + "\t" + " ".join(words[j] for j in t) + f"\t{i % 2}\n")


def data_ner(d: str) -> None:
    """CoNLL NER (sequence_tagging_for_ner, paths fixed in its text: data/train, data/test,
    data/target.txt, data/vocab.txt, data/wordVectors.txt): the corpus' own train/test/target
    samples copied into the scratch data/ folder, a vocabulary of their lower-cased words plus
    "UUUNKKK", and 50-wide word vectors (cs224d's wordVectors.txt layout: one row per word)."""
    r = _rng("ner")
    src = os.path.join(os.environ.get("FLUID_CORPUS", ""), "fluid14/fluid/PaddleNLP/sequence_tagging_for_ner/data")
    out = os.path.join(d, "data")
    os.makedirs(out, exist_ok=True)
    words = {"UUUNKKK"}
    for part in ("train", "test", "target.txt"):
        shutil.copy(os.path.join(src, part), os.path.join(out, part))
        if part != "target.txt":
            with open(os.path.join(src, part)) as f:
                words.update(ln.split()[0].lower() for ln in f if ln.strip())
    words = sorted(words)
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\n".join(words) + "\n")
    with open(os.path.join(out, "wordVectors.txt"), "w") as f:
        for _ in words:
            f.write(" ".join("%.5f" % v for v in r.normal(0, 0.1, 50)) + "\n")


def data_chinese_ner(d: str) -> None:
    """chinese_ner (";words;labels;mentions;" lines): 32 train and 16 test lines of the corpus'
    own samples whose sentences have 9-16 words (one sequence-length bucket: one compilation per
    program), word ids folded into 1000 (the runner passes --word_dict_len 1000; the script's
    default table has 1,942,563 rows)."""
    src = os.path.join(os.environ.get("FLUID_CORPUS", ""), "fluid14/fluid/PaddleNLP/chinese_ner/data")
    for part, n in (("train", 32), ("test", 16)):
        os.makedirs(os.path.join(d, f"{part}_files"), exist_ok=True)
        out = []
        with open(os.path.join(src, f"{part}_files", f"{part}_part_1")) as f:
            for line in f:
                fields = line.strip().split(";")
                words = fields[1].split()
                if 9 <= len(words) <= 16 and len(out) < n:
                    fields[1] = " ".join(str(int(w) % 1000) for w in words)
                    out.append(";".join(fields) + "\n")
        with open(os.path.join(d, f"{part}_files", f"{part}_part_1"), "w") as f:
            f.write("".join(out))


def _pickle_dicts(objs) -> bytes:
    """Pickle protocol 3 bytes of a tuple of dicts {bytes: list of ints or of int lists}, written
    opcode by opcode (no pickle module here): DAM's data file is a pickle by the script's design."""
    import struct
    out = [b"\x80\x03"]

    def put(v):
        if isinstance(v, bytes):
            out.append(b"C" + bytes([len(v)]) + v)          # SHORT_BINBYTES
        elif isinstance(v, int):
            out.append(b"J" + struct.pack("<i", v))           # BININT
        elif isinstance(v, list):
            out.append(b"](")                                 # EMPTY_LIST, MARK
            for x in v:
                put(x)
            out.append(b"e")                                  # APPENDS
        elif isinstance(v, dict):
            out.append(b"}(")                                 # EMPTY_DICT, MARK
            for k, x in v.items():
                put(k)
                put(x)
            out.append(b"u")                                  # SETITEMS
        else:
            raise TypeError(type(v))
    out.append(b"(")
    for o in objs:
        put(o)
    out.append(b"t.")                                         # TUPLE, STOP
    return b"".join(out)


def data_dam(d: str) -> None:
    """DAM (deep attention matching): dam.pkl, the script's (train, valid, test) pickle of dicts
    {b'y': labels, b'c': contexts (word ids, turns separated by _EOS_ = 1), b'r': responses}; a
    response is the true one (label 1, it repeats the last turn's words) or a random one (0).
    Every context has 4 turns of 4 words and every response 12 words: the script's reader makes
    NumPy arrays of them (np.array of ragged lists is an error since NumPy 1.24) and its padding
    path calls list.extend, which only the cut path (longer than max_turn_num / max_turn_len) avoids."""
    r = _rng("dam")

    def part(n, group):
        y, c, rs = [], [], []
        for i in range(n):
            turns = [[int(w) for w in r.randint(2, 300, 4)] for _ in range(4)]
            label = int(i % group == 0)
            resp = turns[-1] * 3 if label else [int(w) for w in r.randint(2, 300, 12)]
            ctx = []
            for t in turns:
                ctx += t + [1]
            y.append(label)
            c.append(ctx)
            rs.append(resp)
        return {b"y": y, b"c": c, b"r": rs}
    with open(os.path.join(d, "dam.pkl"), "wb") as f:
        # valid/test: groups of 10 candidates, the true response first (Ubuntu's evaluation layout)
        f.write(_pickle_dicts([part(24, 2), part(20, 10), part(20, 10)]))


def data_cityscapes_seg(d: str) -> None:
    """Cityscapes for segmentation: leftImg8bit/train/aachen/*_leftImg8bit.png (96x192 RGB) and
    gtFine/train/aachen/*_gtFine_labelTrainIds.png (train ids 0-18, some 255 = ignore) —
    DeepLabv3+ finds them under --dataset_path; ICNet reads data/cityscape/train.list
    ("image label" paths under its fixed ./data/cityscape) from the scratch folder."""
    import numpy as np
    from PIL import Image
    r = _rng("cityscapes_seg")
    lines = []
    for sub in ("leftImg8bit", "gtFine"):
        for part in ("train", "val"):
            os.makedirs(os.path.join(d, sub, part, "aachen"), exist_ok=True)
    for part in ("train", "val"):
        for i in range(4):
            stem = f"aachen_{i:06d}_000019"
            img = np.clip(r.normal(110, 50, (96, 192, 3)), 0, 255).astype("uint8")
            label = np.repeat(np.repeat(r.randint(0, 19, (6, 12)), 16, 0), 16, 1).astype("uint8")
            label[:8] = 255
            image_path = f"leftImg8bit/{part}/aachen/{stem}_leftImg8bit.png"
            label_path = f"gtFine/{part}/aachen/{stem}_gtFine_labelTrainIds.png"
            Image.fromarray(img).save(os.path.join(d, image_path))
            Image.fromarray(label).save(os.path.join(d, label_path))
            if part == "train":
                lines.append(f"../../{image_path} ../../{label_path}\n")
    os.makedirs(os.path.join(d, "data", "cityscape"), exist_ok=True)
    for name in ("train.list", "val.list"):
        with open(os.path.join(d, "data", "cityscape", name), "w") as f:
            f.write("".join(lines))


def data_mpii(d: str) -> None:
    """MPII human pose (human_pose_estimation, cfg.DATAROOT data/mpii relative to the scratch folder):
    annot/train.json and valid.json (image, center, scale, 16 joints, joints_vis) and images/ JPEGs."""
    import numpy as np
    from PIL import Image
    r = _rng("mpii")
    root = os.path.join(d, "data", "mpii")
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    os.makedirs(os.path.join(root, "annot"), exist_ok=True)
    anno = []
    for i in range(8):
        name = f"{i + 1:09d}.jpg"
        Image.fromarray(np.clip(r.normal(120, 40, (160, 200, 3)), 0, 255).astype("uint8")).save(
            os.path.join(root, "images", name))
        joints = np.stack([r.uniform(60, 140, 16), r.uniform(40, 120, 16)], 1).round(1)
        anno.append({"image": name, "center": [100.0, 80.0], "scale": 0.6, "joints": joints.tolist(),
                     "joints_vis": [1] * 16})
    for part in ("train", "valid"):
        with open(os.path.join(root, "annot", f"{part}.json"), "w") as f:
            json.dump(anno, f)


def data_bmn(d: str) -> None:
    """ActivityNet features for BMN (PaddleCV/video, paths of configs/bmn.yaml under the scratch
    folder): data/dataset/bmn/fix_feat_100/<video>.npy ([100, 400] float32 per video) and
    activitynet_1.3_annotations.json (subset, duration_second, segments), 4 training videos and 2
    validation ones."""
    import numpy as np
    r = _rng("bmn")
    root = os.path.join(d, "data", "dataset", "bmn")
    os.makedirs(os.path.join(root, "fix_feat_100"), exist_ok=True)
    anno = {}
    for i in range(6):
        name = f"v_{i:04d}"
        np.save(os.path.join(root, "fix_feat_100", name + ".npy"), r.rand(100, 400).astype("float32"))
        start = float(r.uniform(0, 5))
        anno[name] = {"subset": "training" if i < 4 else "validation", "duration_second": 10.0,
                      "annotations": [{"segment": [start, start + float(r.uniform(1, 4))], "label": "x"}]}
    with open(os.path.join(root, "activitynet_1.3_annotations.json"), "w") as f:
        json.dump(anno, f)


def data_youtube8m(d: str) -> None:
    """YouTube-8M frame features as PaddleCV/video's feature_reader reads them (AttentionLSTM,
    AttentionCluster, NeXtVLAD): data/dataset/youtube8m/{train,val}.list naming pickle files (the
    dataset's own format: a list of records with byte keys nframes, feature uint8 [n, 1024], audio
    uint8 [n, 128], label ids, video), 4 videos of 100 frames each."""
    import pickle
    import numpy as np
    r = _rng("youtube8m")
    root = os.path.join(d, "data", "dataset", "youtube8m")
    os.makedirs(root, exist_ok=True)
    for part in ("train", "val"):
        records = [{b"nframes": 100, b"feature": r.randint(0, 256, (100, 1024)).astype("uint8"),
                    b"audio": r.randint(0, 256, (100, 128)).astype("uint8"),
                    b"label": [int(v) for v in r.randint(0, 3862, 1 + i % 3)], b"video": f"{part}{i}".encode()}
                   for i in range(4)]
        path = os.path.join(root, f"{part}.pkl")
        with open(path, "wb") as f:
            pickle.dump(records, f, protocol=2)
        with open(os.path.join(root, f"{part}.list"), "w") as f:
            f.write(path + "\n")
    os.makedirs(os.path.join(root, "yt8m_pca"), exist_ok=True)      # NeXtVLAD's PCA eigenvalues
    np.save(os.path.join(root, "yt8m_pca", "eigenvals.npy"), r.uniform(0.1, 2.0, (1024, 1)).astype("float32"))


def _tensor_stream(array) -> bytes:
    """One float32 array in Paddle's LoDTensor file format (what fluid.io.save_vars writes per
    variable: version, no LoD, version, the TensorDesc proto {data_type FP32, dims}, the data)."""
    import struct

    def varint(n: int) -> bytes:
        out = b""
        while True:
            byte, n = n & 0x7F, n >> 7
            out += bytes([byte | (0x80 if n else 0)])
            if not n:
                return out
    desc = b"\x08\x05" + b"".join(b"\x10" + varint(int(d)) for d in array.shape)
    return (struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc
            + array.astype("<f4", copy=False).tobytes(order="C"))


def data_spade(d: str) -> None:
    """SPADE: the cityscapes pairs (:func:`data_cityscapes`) and VGG19_pretrained/, the VGG19
    weights its perceptual loss loads with fluid.io.load_vars (one file per variable,
    vgg19_conv{block}_{i}_weights [out, in, 3, 3], random values)."""
    import numpy as np
    from PIL import Image
    data_cityscapes(d)
    r = _rng("spade_vgg19")
    # its triplex reader: "label\timage\tinstance" lines (label ids < label_nc, an instance map)
    city = os.path.join(d, "cityscapes")
    os.makedirs(os.path.join(city, "spade"), exist_ok=True)
    lines = []
    for i in range(4):
        Image.fromarray(r.randint(0, 36, (72, 144)).astype("uint8")).save(os.path.join(city, "spade", f"{i}_label.png"))
        Image.fromarray((r.randint(0, 4, (72, 144)) * 1000).astype("uint16")).save(
            os.path.join(city, "spade", f"{i}_inst.png"))
        lines.append(f"spade/{i}_label.png\ttrainB/{i}.jpg\tspade/{i}_inst.png\n")
    with open(os.path.join(city, "spade_train.txt"), "w") as f:
        f.write("".join(lines))
    root = os.path.join(d, "VGG19_pretrained")
    os.makedirs(root, exist_ok=True)
    channels = 3
    for block, (width, convs) in enumerate([(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)], 1):
        for i in range(1, convs + 1):
            w = (r.randn(width, channels, 3, 3) * np.sqrt(2.0 / (channels * 9))).astype("float32")
            with open(os.path.join(root, f"vgg19_conv{block}_{i}_weights"), "wb") as f:
                f.write(_tensor_stream(w))
            channels = width


def data_ctcn(d: str) -> None:
    """ActivityNet snippet scores for C-TCN (PaddleCV/video, paths of configs/ctcn.yaml under the
    scratch folder): data/dataset/ctcn/feats/<rgb or flow dir>/<video>.pkl (the dataset's own
    format: a dict with the byte key scores, [frames, 201] per stream) and the .listformat files
    ("name frames boxes {label xmin xmax}..."), 1 training video and 2 validation ones."""
    import pickle
    r = _rng("ctcn")
    root = os.path.join(d, "data", "dataset", "ctcn")
    streams = {"train": ("senet152-201cls-rgb-70.3-5seg-331data_331img_train",
                         "senet152-201cls-flow-60.9-5seg-331data_train"),
               "val": ("senet152-201cls-rgb-70.3-5seg-331data_331img_val",
                       "senet152-201cls-flow-60.9-5seg-331data_val")}
    # 1 training video: at batch 1 a step is ~2.6 TFLOP (its fixed [512, 402] geometry), ~140 s on
    # 2 cores (plus ~110 s of compilation the first time): one step fits the 300 s, two do not
    for part, count in (("train", 1), ("val", 2)):
        lines = []
        for i in range(count):
            name, frames = f"{part}_{i:03d}", 200 + 20 * i
            for folder in streams[part]:
                os.makedirs(os.path.join(root, "feats", folder), exist_ok=True)
                scores = [[float(v) for v in row] for row in r.rand(frames, 201).astype("float32")]
                with open(os.path.join(root, "feats", folder, name + ".pkl"), "wb") as f:
                    pickle.dump({b"scores": scores}, f, protocol=2)
            if part == "train":
                # 10 actions of 18 frames with 2-frame gaps: whatever its random_move / random_crop
                # (>= 30% of the video) keep, a crop holds an action's centre, so the one training
                # video always gives a step (a crop without one is skipped by its reader)
                step = frames // 10
                acts = [f"{int(r.randint(1, 201))} {k * step + 2} {k * step + step}" for k in range(10)]
                lines.append(f"{name} {frames} 10 " + " ".join(acts))
                continue
            start = int(r.randint(10, frames // 2))
            lines.append(f"{name} {frames} 1 {int(r.randint(1, 201))} {start} {start + int(r.randint(30, 80))}")
        with open(os.path.join(root, f"Activity1.3_{part}_rgb.listformat"), "w") as f:
            f.write("\n".join(lines) + "\n")
    # the metrics read the class names and, per validation video, "name frames duration_seconds"
    with open(os.path.join(root, "labels.txt"), "w") as f:
        f.write("".join(f"class_{c}\n" for c in range(201)))
    with open(os.path.join(root, "val_duration_frame.list"), "w") as f:
        f.write("".join(f"val_{i:03d} {200 + 20 * i} {(200 + 20 * i) / 5.0}\n" for i in range(2)))


DATA = {"spade": data_spade, "ctcn": data_ctcn, "youtube8m": data_youtube8m, "bmn": data_bmn, "mpii": data_mpii, "cityscapes_seg": data_cityscapes_seg, "mnist_gz": data_mnist_gz, "celeba": data_celeba, "wider": data_wider, "senta": data_senta, "cityscapes": data_cityscapes, "coco": data_coco, "voc": data_voc, "sop": data_sop, "imagenet": data_imagenet, "word2vec": data_word2vec, "criteo": data_criteo, "esmm": data_esmm,
        "wide_deep": data_wide_deep, "din": data_din, "ncf": data_ncf, "gnn": data_gnn, "mmoe": data_mmoe,
        "gru4rec": data_gru4rec,
        "text_cls": data_text_cls, "ptb": data_ptb, "lac": data_lac, "wmt": data_wmt, "ocr": data_ocr,
        "simnet": data_simnet, "ner": data_ner, "dam": data_dam, "chinese_ner": data_chinese_ner}

# -- the scripts ----------------------------------------------------------------------------------
# name, target (the brief's model family), path under the corpus, args ("{data}": the synthetic data
# folder), data (a DATA key), cwd/root under the corpus, env, book data (BOOK_DATA for paddle.dataset).
R18CV, R15CV, F14 = "r18/PaddleCV", "r15/PaddleCV", "fluid14/fluid"
IC_ARGS = ["--use_gpu", "False", "--data_dir", "{data}", "--batch_size", "4", "--test_batch_size", "4",
           "--num_epochs", "1", "--max_iter", "3", "--total_images", "24", "--class_dim", "10",
           "--image_shape", "3", "224", "224", "--reader_thread", "1", "--print_step", "1",
           "--validate", "False", "--lr_strategy", "cosine_decay", "--model_save_dir", "{data}/out"]
IC_MODELS = ["ResNet50", "ResNet18_vd", "ResNeXt50_32x4d", "SE_ResNeXt50_32x4d", "MobileNetV1", "MobileNetV2",
             "MobileNetV3_small_x1_0", "VGG11", "AlexNet", "GoogLeNet", "InceptionV4", "DenseNet121",
             "ShuffleNetV2_x1_0", "SqueezeNet1_0", "DarkNet53", "Xception41", "DPN68", "EfficientNetB0",
             "Res2Net50_26w_4s", "HRNet_W18_C"]

# the two largest graphs train on 128x128 images (their own --image_shape): well inside the timeout
IC_SMALL = set()
SCRIPTS = [dict(name="ic_" + m.lower(), target="image classification", path=f"{R18CV}/image_classification/train.py",
                args=["--model", m] + IC_ARGS + (["--image_shape", "3", "128", "128"] if m in IC_SMALL else []),
                data="imagenet") for m in IC_MODELS]
SCRIPTS += [
    dict(name="metric_elem", target="metric learning", path=f"{R18CV}/metric_learning/train_elem.py",
         args=["--use_gpu", "False", "--model", "ResNet50", "--train_batch_size", "4", "--test_batch_size", "4",
               "--image_shape", "3,224,224", "--class_dim", "10", "--total_iter_num", "3", "--display_iter_step", "1",
               "--test_iter_step", "100", "--save_iter_step", "100", "--model_save_dir", "{data}/out"],
         data="sop", in_data=True),
    dict(name="metric_pair", target="metric learning", path=f"{R18CV}/metric_learning/train_pair.py",
         args=["--use_gpu", "False", "--model", "ResNet50", "--train_batch_size", "6", "--test_batch_size", "4",
               "--image_shape", "3,224,224", "--total_iter_num", "3", "--display_iter_step", "1",
               "--test_iter_step", "100", "--save_iter_step", "100", "--model_save_dir", "{data}/out"],
         data="sop", in_data=True),
    dict(name="ocr_ctc", target="OCR (CTC)", path=f"{R18CV}/ocr_recognition/train.py",
         args=["--model", "crnn_ctc", "--use_gpu", "False", "--batch_size", "4", "--total_step", "3",
               "--log_period", "1", "--eval_period", "100", "--save_model_period", "100",
               "--train_images", "{data}/train_images", "--train_list", "{data}/train.list",
               "--test_images", "{data}/test_images", "--test_list", "{data}/test.list",
               "--save_model_dir", "{data}/out"], data="ocr"),
    dict(name="ocr_attention", target="OCR (attention)", path=f"{R18CV}/ocr_recognition/train.py",
         args=["--model", "attention", "--use_gpu", "False", "--batch_size", "4", "--total_step", "3",
               "--log_period", "1", "--eval_period", "100", "--save_model_period", "100",
               "--train_images", "{data}/train_images", "--train_list", "{data}/train.list",
               "--test_images", "{data}/test_images", "--test_list", "{data}/test.list",
               "--save_model_dir", "{data}/out"], data="ocr"),
    dict(name="ssd", target="detection (SSD)", path=f"{R15CV}/ssd/train.py",
         args=["--use_gpu", "False", "--batch_size", "2", "--epoc_num", "1", "--parallel", "False",
               "--data_dir", "{data}", "--dataset", "pascalvoc", "--pretrained_model", "",
               "--use_multiprocess", "False", "--model_save_dir", "{data}/out"], data="voc"),
    dict(name="yolov3", target="detection (YOLOv3)", path=f"{R15CV}/yolov3/train.py",
         args=["--use_gpu", "False", "--batch_size", "2", "--max_iter", "3", "--snapshot_iter", "100",
               "--data_dir", "{data}", "--input_size", "320", "--random_shape", "False", "--class_num", "5", "--syncbn", "False", "--use_multiprocess_reader", "False",
               "--pretrain", "", "--model_save_dir", "{data}/out"], data="coco",
         env={"CUDA_VISIBLE_DEVICES": "0"}),   # else it counts devices with nvidia-smi
    dict(name="faster_rcnn", target="detection (Faster R-CNN)", path=f"{R15CV}/rcnn/train.py",
         args=["--use_gpu", "False", "--model_save_dir", "{data}/out", "--max_iter", "3", "--im_per_batch", "1",
               "--data_dir", "{data}", "--parallel", "False", "--log_window", "1", "--MASK_ON", "False", "--max_size", "320",
               "--pretrained_model", "", "--batch_size_per_im", "64"], data="coco", env={"CUDA_VISIBLE_DEVICES": "0"}),
    dict(name="mask_rcnn", target="detection (Mask R-CNN)", path=f"{R15CV}/rcnn/train.py",
         args=["--use_gpu", "False", "--model_save_dir", "{data}/out", "--max_iter", "3", "--im_per_batch", "1",
               "--data_dir", "{data}", "--parallel", "False", "--log_window", "1", "--MASK_ON", "True", "--max_size", "320",
               "--pretrained_model", "", "--batch_size_per_im", "64"], data="coco", env={"CUDA_VISIBLE_DEVICES": "0"}),
    dict(name="ssd_f14", target="detection (SSD, Fluid 1.4)", path=f"{F14}/PaddleCV/object_detection/train.py",
         args=["--use_gpu", "False", "--batch_size", "2", "--epoc_num", "1", "--parallel", "False",
               "--data_dir", "{data}", "--dataset", "pascalvoc", "--pretrained_model", "",
               "--model_save_dir", "{data}/out"], data="voc"),
    dict(name="icnet", target="segmentation (ICNet)", path=f"{R15CV}/icnet/train.py",
         # --random_scaling False: the reader pads each randomly scaled image to 720x720 with ignore
         # labels, so the mask feeds' lengths (the valid pixels) change every step and each new
         # length is a new XLA compilation (24 s CPU each); unscaled, every step has one length
         args=["--use_gpu", "False", "--batch_size", "2", "--checkpoint_path", "{data}/out",
               "--random_scaling", "False"],
         data="cityscapes_seg", in_data=True, overrides={"TOTAL_STEP": 3}),
    dict(name="deeplabv3p", target="segmentation (DeepLabv3+)", path=f"{R15CV}/deeplabv3+/train.py",
         args=["--use_gpu", "False", "--batch_size", "2", "--train_crop_size", "129", "--total_step", "3",
               "--dataset_path", "{data}", "--save_weights_path", "{data}/out", "--parallel", "False",
               "--use_py_reader", "False", "--num_workers", "1"], data="cityscapes_seg"),
    dict(name="face_pyramidbox", target="detection (face)", path=f"{R18CV}/face_detection/train.py",
         args=["--use_gpu", "False", "--batch_size", "2", "--epoc_num", "1", "--parallel", "False",
               "--data_dir", "{data}", "--resize_h", "160", "--resize_w", "160", "--pretrained_model", "",
               "--use_multiprocess", "False", "--model_save_dir", "{data}/out"], data="wider"),
    dict(name="pose_simplebase", target="pose estimation", path=f"{R18CV}/human_pose_estimation/train.py",
         args=["--use_gpu", "False", "--batch_size", "2", "--num_epochs", "1", "--dataset", "mpii",
               "--pretrained_model", "", "--total_images", "8", "--model_save_dir", "{data}/out"],
         data="mpii", in_data=True),
]
VIDEO = ["TSN", "TSM", "AttentionLSTM", "AttentionCluster", "NEXTVLAD", "STNET", "NONLOCAL", "CTCN", "BMN"]
SCRIPTS += [dict(name="video_" + m.lower(), target="video", path=f"{R18CV}/video/train.py",
                 args=["--model_name", m, "--config", "configs/" + {"AttentionLSTM": "attention_lstm",
                                                                    "AttentionCluster": "attention_cluster"}
                       .get(m, m.lower()) + ".yaml", "--use_gpu", "False",
                       # NeXtVLAD: batch 4 leaves one piecewise_decay boundary (2e6 // batch < max_iter;
                       # with none, its Switch has no case and Fluid refuses it too)
                       # C-TCN: its [512, 402] score "images" through a 50-layer ResNet-FPN hold ~13 GB of
                       # activations and gradients a video: one
                       "--batch_size", {"NEXTVLAD": "4", "CTCN": "1"}.get(m, "2"), "--epoch", "1", "--log_interval", "1",
                       "--valid_interval", "100",
                       "--save_dir", "{data}/out"],
                 **(dict(data="bmn", in_data=True) if m == "BMN" else
                    dict(data="ctcn", in_data=True) if m == "CTCN" else
                    dict(data="youtube8m", in_data=True) if m in ("AttentionLSTM", "AttentionCluster", "NEXTVLAD")
                    else {})) for m in VIDEO]
GAN = ["CGAN", "DCGAN", "CycleGAN", "Pix2pix", "StarGAN", "AttGAN", "STGAN", "SPADE"]
SCRIPTS += [dict(name="gan_" + m.lower(), target="GAN", path=f"{R18CV}/gan/train.py",
                 args=["--model_net", m, "--dataset", {"CGAN": "mnist", "DCGAN": "mnist", "StarGAN": "celeba",
                                                       "AttGAN": "celeba", "STGAN": "celeba"}.get(m, "cityscapes"),
                       "--batch_size", "32" if m in ("CGAN", "DCGAN") else "1", "--epoch", "1", "--use_gpu",
                       "False", "--run_test", "False", "--save_checkpoints", "False", "--max_iter", "4",
                       "--output", "{data}/out", "--data_dir", "{data}"]
                      + (["--vgg19_pretrain", "{data}/VGG19_pretrained", "--train_list",
                          "{data}/cityscapes/spade_train.txt", "--crop_width", "128", "--crop_height", "64",
                          "--load_width", "144", "--load_height", "72"] if m == "SPADE" else [])
                      + (["--image_size", "286", "--crop_size", "256"] if m in ("Pix2pix", "SPADE")   # its U-Net: 8 halvings
                         else ["--image_size", "64", "--crop_size", "64", "--gan_mode", "wgan"]   # as scripts/run_*.sh
                         + (["--dis_norm", "instance_norm"] if m != "StarGAN" else [])
                         if m in ("StarGAN", "AttGAN", "STGAN")
                         else ["--image_size", "72", "--crop_size", "64"]),
                 data="spade" if m == "SPADE" else "cityscapes" if m in ("CycleGAN", "Pix2pix") else
                      "mnist_gz" if m in ("CGAN", "DCGAN") else "celeba",
                 book={"mnist": {"train": 256, "test": 64}}) for m in GAN]
R18NLP, R18REC = "r18/PaddleNLP", "r18/PaddleRec"
SENTA = ["bilstm_net", "bow_net", "cnn_net", "gru_net", "lstm_net"]
SCRIPTS += [dict(name="senta_" + m, target="sentiment", path=f"{R18NLP}/sentiment_classification/run_classifier.py",
                 args=["--use_cuda", "false", "--do_train", "true", "--do_val", "false", "--do_infer", "false",
                       "--batch_size", "8", "--data_dir", "{data}", "--vocab_path", "{data}/word_dict.txt",
                       "--checkpoints", "{data}/out", "--save_steps", "1000", "--validation_steps", "1000",
                       "--epoch", "1", "--senta_config_path", "./senta_config.json", "--skip_steps", "1",
                       "--random_seed", "0", "--task_name", "senta", "--model_type", m], data="senta")
            for m in SENTA]
SCRIPTS += [
    dict(name="emotion_detection", target="text classification", path=f"{R18NLP}/emotion_detection/run_classifier.py",
         args=["--use_cuda", "false", "--do_train", "true", "--do_val", "false", "--do_infer", "false",
               "--batch_size", "8", "--data_dir", "{data}", "--vocab_path", "{data}/word_dict.txt",
               "--save_checkpoint_dir", "{data}/out", "--save_steps", "1000", "--validation_steps", "1000",
               "--epoch", "1", "--skip_steps", "1", "--model_type", "textcnn_net"],
         data="text_cls"),
    *[dict(name="text_cls_" + m, target="text classification", path=f"{F14}/PaddleNLP/text_classification/train.py",
           args=[m], book={"imdb": {"train": 256, "test": 64, "len": [5, 40]}}) for m in ("bow", "cnn", "lstm", "gru")],
    dict(name="lac", target="LAC", path=f"{R18NLP}/lexical_analysis/train.py",
         args=["--use_cuda", "false", "--train_data", "{data}/train.tsv", "--test_data", "{data}/test.tsv",
               "--batch_size", "8", "--epoch", "1", "--save_steps", "1000", "--validation_steps", "1000",
               "--print_steps", "1", "--model_save_dir", "{data}/out", "--word_emb_dim", "32",
               "--grnn_hidden_dim", "32", "--bigru_num", "1"], data="lac"),
    # its main() call fixes the paths (data/..., relative: in_data) and num_passes=2000 (override)
    dict(name="ner", target="NER", path=f"{F14}/PaddleNLP/sequence_tagging_for_ner/train.py", args=[],
         data="ner", in_data=True, overrides={"main(num_passes=...)": 2}),
    dict(name="chinese_ner", target="NER", path=f"{F14}/PaddleNLP/chinese_ner/train.py",
         args=["--device", "CPU", "--num_passes", "1", "--batch_size", "8", "--word_dict_len", "1000",
               "--train_data_dir", "{data}/train_files", "--test_data_dir", "{data}/test_files",
               "--model_save_dir", "{data}/out"], data="chinese_ner", timeout=240),
    dict(name="language_model", target="language model", path=f"{R18NLP}/language_model/train.py",
         args=["--model_type", "small", "--use_gpu", "False", "--data_path", "{data}", "--max_epoch", "1",
               "--batch_size", "4", "--log_path", "{data}/lm.log", "--save_model_dir", "{data}/out"], data="ptb"),
    dict(name="lm_gru", target="language model", path=f"{F14}/PaddleNLP/language_model/gru/train.py", args=[]),
    dict(name="transformer", target="transformer", path=f"{R18NLP}/machine_translation/transformer/main.py",
         args=["--do_train", "True", "--do_predict", "False", "--use_cuda", "False", "--epoch", "1",
               "--training_file", "{data}/train.tok.bpe", "--src_vocab_fpath", "{data}/vocab.bpe",
               "--trg_vocab_fpath", "{data}/vocab.bpe", "--special_token", "<s>", "<e>", "<unk>",
               "--batch_size", "256", "--n_layer", "2", "--n_head", "2", "--d_model", "32", "--d_inner_hid", "64",
               "--d_key", "16", "--d_value", "16", "--print_step", "1", "--save_step", "1000",
               "--save_model_path", "{data}/out", "--max_length", "32"], data="wmt"),
    dict(name="transformer_f14", target="transformer", path=f"{F14}/PaddleNLP/neural_machine_translation/transformer/train.py",
         args=["--src_vocab_fpath", "{data}/vocab.bpe", "--trg_vocab_fpath", "{data}/vocab.bpe",
               "--train_file_pattern", "{data}/train.tok.bpe", "--use_token_batch", "True", "--batch_size", "256",
               "--pool_size", "100", "--special_token", "<s>", "<e>", "<unk>", "--device", "CPU",
               "n_layer", "2", "d_model", "32", "d_inner_hid", "64", "d_key", "16", "d_value", "16",
               "pass_num", "1"], data="wmt"),
    dict(name="rnn_search", target="seq2seq", path=f"{F14}/PaddleNLP/neural_machine_translation/rnn_search/train.py",
         args=["--pass_num", "1", "--batch_size", "8", "--dict_size", "100", "--embedding_dim", "16",
               "--encoder_size", "16", "--decoder_size", "16", "--use_gpu", "False"], book={"wmt14": {"train": 64, "test": 16, "len": [3, 10]}}),
    dict(name="seq2seq_attention", target="seq2seq", path=f"{R18NLP}/seq2seq/seq2seq/train.py",
         args=["--src_lang", "en", "--tar_lang", "vi", "--attention", "True", "--num_layers", "1",
               "--hidden_size", "16", "--src_vocab_size", "203", "--tar_vocab_size", "203", "--batch_size", "8",
               "--dropout", "0.2", "--init_scale", "0.1", "--max_grad_norm", "5.0", "--train_data_prefix",
               "{data}/train", "--eval_data_prefix", "{data}/tst2012", "--test_data_prefix", "{data}/tst2013",
               "--vocab_prefix", "{data}/vocab", "--use_gpu", "False", "--max_epoch", "1",
               "--model_path", "{data}/out"], data="wmt"),
    dict(name="variational_seq2seq", target="seq2seq", path=f"{R18NLP}/seq2seq/variational_seq2seq/train.py",
         args=["--vocab_size", "203", "--num_layers", "1", "--hidden_size", "16", "--batch_size", "8",
               "--max_epoch", "1", "--use_gpu", "False", "--dataset_prefix", "{data}/ptb", "--model_path",
               "{data}/out"], data="ptb"),
    dict(name="dam", target="DAM", path=f"{F14}/PaddleNLP/deep_attention_matching_net/train_and_evaluate.py",
         args=["--num_scan_data", "1", "--batch_size", "4", "--_EOS_", "1",
               "--stack_num", "1", "--max_turn_num", "3", "--max_turn_len", "10", "--vocab_size", "300",
               "--emb_size", "16", "--save_path", "{data}/out", "--data_path", "{data}/dam.pkl"], data="dam",
         env={"CPU_NUM": "1"}),   # its test loop runs inside its per-device loop: one device
    dict(name="simnet_bow", target="text matching", path=f"{R18NLP}/similarity_net/run_classifier.py",
         args=["--task_name", "simnet", "--task_mode", "pairwise", "--use_cuda", "False", "--do_train", "True", "--do_valid", "True",
               "--valid_data_dir", "{data}/valid.tsv",
               "--do_test", "False", "--do_infer", "False", "--batch_size", "8", "--epoch", "1",
               "--config_path", "./config/bow_pairwise.json", "--vocab_path", "{data}/vocab.txt",
               "--train_data_dir", "{data}/train_pairwise.tsv", "--output_dir", "{data}/out", "--save_steps", "1000",
               "--validation_steps", "1000", "--skip_steps", "1", "--init_checkpoint", ""], data="simnet"),
    # ctr_dnn's distributed path (--is_cloud 1) on fluidjax's local fleet: one trainer, its
    # environment as Fluid's local_cluster.sh sets it (the server endpoint is listed, none runs);
    # --sparse_feature_dim stays 1000001: its dataset_generator.py hashes ids into that range
    dict(name="ctr_dnn", target="CTR (DNN)", path=f"{R18REC}/ctr/dnn/train.py",
         args=["--train_files_path", "{data}/train_data", "--test_files_path", "{data}/test_data",
               "--model_path", "{data}/out", "--batch_size", "16", "--epochs", "1",
               "--cpu_num", "1", "--is_cloud", "1", "--save_model", "1"], data="criteo",
         env={"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINERS_NUM": "1", "PADDLE_TRAINER_ID": "0",
              "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:36011"}),
    dict(name="ctr_deepfm", target="CTR (DeepFM)", path=f"{R18REC}/ctr/deepfm/local_train.py",
         args=["--train_data_dir", "{data}/train_data", "--test_data_dir", "{data}/test_data",
               "--model_output_dir", "{data}/out", "--batch_size", "16", "--num_epoch", "1", "--num_thread", "1",
               "--num_feat", "1001", "--feat_dict", "{data}/aid_data/feat_dict_10.pkl2"], data="criteo"),
    dict(name="ctr_dcn", target="CTR (DCN)", path=f"{R18REC}/ctr/dcn/local_train.py",
         # --steps: batches of the 41M-line Criteo day; 2562500 x 16 = one pass over the synthetic lines
         args=["--train_data_dir", "{data}/train_data", "--test_valid_data_dir", "{data}/test_data",
               "--model_output_dir", "{data}/out", "--batch_size", "16", "--steps", "2562500", "--num_thread", "1",
               "--print_steps", "1", "--vocab_dir", "{data}/vocab", "--cat_feat_num", "{data}/cat_feature_num.txt",
               "--dnn_hidden_units", "32", "32"], data="criteo"),
    dict(name="ctr_xdeepfm", target="CTR (xDeepFM)", path=f"{R18REC}/ctr/xdeepfm/local_train.py",
         args=["--train_data_dir", "{data}/ids_train", "--test_data_dir", "{data}/ids_test",
               "--model_output_dir", "{data}/out", "--batch_size", "16", "--num_epoch", "1", "--num_thread", "1",
               "--num_feat", "1001", "--print_steps", "1", "--use_gpu", "0"], data="criteo"),
    dict(name="ctr_wide_deep", target="CTR (wide&deep)", path=f"{R18REC}/ctr/wide_deep/train.py",
         args=["--epochs", "1", "--batch_size", "16", "--use_gpu", "0", "--train_data_path",
               "{data}/train_data.csv", "--test_data_path", "{data}/test_data.csv", "--model_dir", "{data}/out"],
         data="wide_deep"),
    dict(name="din", target="CTR (DIN)", path=f"{R18REC}/ctr/din/train.py",
         args=["--batch_size", "8", "--epoch_num", "1", "--use_cuda", "0", "--config_path", "{data}/config.txt",
               "--train_dir", "{data}/paddle_train.txt", "--model_dir", "{data}/out"], data="din"),
    dict(name="gru4rec", target="GRU4Rec", path=f"{R18REC}/gru4rec/train.py",
         args=["--train_dir", "train_data", "--vocab_path", "vocab.txt", "--batch_size", "5", "--pass_num", "1",
               "--model_dir", "{data}/out", "--print_batch", "1", "--hid_size", "16", "--step_num", "3",
               "--enable_ce"], env={"CPU_NUM": "1"}),   # --enable_ce: its step cap (20 batches, one compilation per LoD)
    # no step cap in its text: 8 synthetic sessions, one batch (its sort_batch yields a leftover
    # group only when it is exactly one batch)
    dict(name="gru4rec_neg", target="GRU4Rec", path=f"{R18REC}/gru4rec/train_sample_neg.py",
         args=["--train_dir", "{data}/train", "--vocab_path", "{data}/vocab.txt", "--batch_size", "8",
               "--pass_num", "1", "--model_dir", "{data}/out", "--print_batch", "1", "--hid_size", "16",
               "--neg_size", "3"], data="gru4rec"),
    dict(name="tagspace", target="TagSpace", path=f"{R18REC}/tagspace/train.py",
         args=["--train_dir", "train_data", "--batch_size", "5", "--pass_num", "1", "--model_dir", "{data}/out",
               "--print_batch", "1"]),
    dict(name="ssr", target="SSR", path=f"{R18REC}/ssr/train.py",
         args=["--train_dir", "train_data", "--vocab_path", "vocab.txt", "--batch_size", "5", "--epochs", "1",
               "--model_dir", "{data}/out", "--print_batch", "1", "--hidden_size", "16", "--embedding_dim", "16",
               "--step_num", "3", "--enable_ce"], env={"CPU_NUM": "1"}),   # --enable_ce: its step cap
    dict(name="multiview_simnet", target="multiview-simnet", path=f"{R18REC}/multiview_simnet/train.py",
         args=["--epochs", "1", "--batch_size", "8", "--sparse_feature_dim", "1001", "--embedding_dim", "16",
               "--hidden_size", "16", "--query_encode_dim", "16", "--title_encode_dim", "16",
               "--model_output_dir", "{data}/out"]),
    dict(name="word2vec", target="word2vec", path=f"{R18REC}/word2vec/train.py",
         args=["--train_data_dir", "{data}/text", "--dict_path", "{data}/dict", "--batch_size", "16",
               "--num_passes", "1", "--embedding_size", "16", "--print_batch", "1",
               "--model_output_dir", "{data}/out"], data="word2vec", env={"CPU_NUM": "1"}),
    dict(name="rec_text_classification", target="text classification", path=f"{R18REC}/text_classification/train.py",
         args=[]),
    dict(name="ncf", target="CTR (NCF)", path=f"{R18REC}/ncf/train.py",
         args=["--epochs", "1", "--batch_size", "8", "--NeuMF", "1", "--num_users", "60", "--num_items", "100",
               "--path", "{data}/", "--dataset", "ml-1m", "--train_data_path", "{data}/train_data.csv",
               "--model_dir", "{data}/out"], data="ncf"),
    dict(name="youtube_dnn", target="recall (YouTube DNN)", path=f"{R18REC}/youtube_dnn/train.py",
         args=["--epochs", "1", "--batch_size", "8", "--use_gpu", "0"]),
    dict(name="esmm", target="multi-task (ESMM)", path=f"{R18REC}/multi_task/esmm/train.py",
         args=["--epochs", "1", "--batch_size", "8", "--use_gpu", "0", "--cpu_num", "1",
               "--train_data_path", "{data}/train_data", "--test_data_path", "{data}/test_data",
               "--model_dir", "{data}/out"], data="esmm"),
    dict(name="mmoe", target="multi-task (MMoE)", path=f"{R18REC}/multi_task/mmoe/mmoe_train.py",
         args=["--epochs", "1", "--batch_size", "8", "--use_gpu", "0", "--feature_size", "20",
               "--train_data_path", "{data}/train_data", "--test_data_path", "{data}/test_data",
               "--model_dir", "{data}/out"], data="mmoe"),
    dict(name="gnn", target="session GNN", path=f"{R18REC}/gnn/train.py",
         args=["--epoch_num", "1", "--batch_size", "8", "--use_cuda", "0", "--use_parallel", "0",
               "--hidden_size", "16", "--train_path", "{data}/diginetica/train.txt",
               "--config_path", "{data}/diginetica/config.txt", "--model_path", "{data}/out"], data="gnn"),
    # DQN: gym and atari_py are the shim's synthetic game; the training loop is endless in the text
    # (while True), so the run ends at its timeout; MEMORY_SIZE (warm-up = MEMORY_SIZE // 20) is
    # rewritten at compile time (book_scripts' overrides; the file is unchanged). Their text (Fluid
    # <= 1.3) pairs policy/target variables by name, which Fluid 1.4+'s accumulator names break
    # (tests/test_fluid1_corpus_rec.py: the names are Paddle's): "own" when that is the failure.
    *[dict(name=n, target=f"DQN-family ({alg})", path=f"{F14}/DeepQNetwork/train.py", endless=True, timeout=150,
           args=["--alg", alg, "--rom", "rom_files/pong.bin", "--mem_size", "2000", "--batch_size", "8",
                 "--test_every_steps", "1000000", "--model_dirname", "{data}/out"],
           overrides={"MEMORY_SIZE": 2000},
           own=(r"IndexError.*list index out of range.*target_vars\[i\]",
                "written for Fluid <= 1.3: it pairs policy/target variables by name, and Fluid 1.4+ names the "
                "optimizer accumulators after their parameter (policy_conv1_moment1_0), so its lists differ "
                "in length in Fluid 1.4+ too (fixed upstream: PaddlePaddle/models b81a7bb6d)"))
      for n, alg in (("dqn", "DQN"), ("double_dqn", "DoubleDQN"), ("dueling_dqn", "DuelingDQN"))],
    dict(name="policy_gradient", target="RL (policy gradient)", path=f"{F14}/policy_gradient/run.py", args=[]),
    dict(name="deepasr", target="DeepASR", path="r18/PaddleSpeech/DeepASR/train.py",
         args=["--device", "CPU", "--batch_size", "2", "--hidden_dim", "32", "--proj_dim", "16",
               "--stacked_num", "1", "--pass_num", "1", "--print_per_batches", "1",
               "--checkpoints", "{data}/out", "--infer_models", "{data}/out"]),
]


# -- classification of a failure ------------------------------------------------------------------
def _last_line(log: str | None) -> str:
    try:
        with open(log, errors="replace") as f:
            lines = [ln.strip() for ln in f.read()[-4000:].splitlines() if ln.strip()]
        return lines[-1][:200] if lines else ""
    except (OSError, TypeError):
        return ""


def classify(r: dict) -> tuple[str, str]:
    """(class, reason): 'ran' / 'own: ...' (the script's, the corpus's or the environment's) /
    'data: ...' / 'fluidjax: ...' / 'script-side: ...' (an error raised in the script's code on a
    value fluidjax gave it) / 'timeout'."""
    err = r.get("error")
    if not err:
        if r.get("rc") == "timeout":
            return "timeout", "killed without a record"
        if r.get("exit") not in (None, 0) or r.get("rc") != 0:
            return "exit", f"sys.exit({r.get('exit')!r}) after: {_last_line(r.get('log'))}"
        return "ran", ""
    t, msg = err["type"], err.get("message") or ""
    if t == "no record":
        return "runner: the child left no record", _last_line(r.get("log"))
    first = msg.splitlines()[0] if msg else ""
    own = next((s.get("own") for s in SCRIPTS if s["name"] == r.get("name")), None)
    if own and re.search(own[0], f"{t}: {msg} {err.get('script_line') or ''}", re.S):
        return f"own: {own[1]}", first     # a failure of the script's text, shown so in Fluid (the spec says why)
    ours = bool(err.get("fluidjax_line")) or "fluidjax" in msg or "paddle.fluid" in msg
    if t == "TimedOut":
        steps = sum(p["steps"] for p in r.get("programs", []))
        if r.get("endless") and steps:
            return "ran (endless loop stopped at the timeout)", f"{steps} training steps"
        return "timeout", f"still running at {err.get('script_line') or err.get('innermost')}"
    if "corpus_shim" in (err.get("innermost") or "") and "book_child.py" not in (err.get("innermost") or ""):
        return "runner: its shim failed", first
    if "CUDAPlace" in msg and "gpu device" in msg:
        return "own: needs a GPU (CUDAPlace fixed in its text)", first
    if t in ("SyntaxError", "TabError", "IndentationError"):
        return "own: Python 2 syntax", first
    if t == "AttributeError" and "module 'numpy' has no attribute" in msg:
        return "own: NumPy 2 refuses", first
    if t == "TypeError" and "load() missing 1 required positional argument: 'Loader'" in msg \
            and re.search(r"yaml\.load\(", err.get("script_line") or err.get("innermost") or ""):
        return "own: PyYAML 6 refuses yaml.load without a Loader", first
    if t == "TypeError" and "only 0-dimensional arrays can be converted to Python scalars" in msg \
            and not err.get("fluidjax_line"):
        # float() / "%f" of a one-element array: NumPy 1.x took it (a deprecation since 1.25), NumPy 2.4 refuses
        return "own: NumPy 2 refuses", first
    if t in ("ModuleNotFoundError", "ImportError"):
        m = re.search(r"No module named '([^']+)'", msg)
        top = m.group(1).split(".")[0] if m else ""
        if m and top not in ("paddle", "fluidjax"):
            local = r.get("_script_dir") and os.path.exists(os.path.join(r["_script_dir"], top))
            return ("own: Python 2 import" if local or top in ("cPickle", "Queue", "StringIO", "urllib2",
                                                               "commands", "ConfigParser")
                    else "own: third-party module missing"), first
        if "cannot import name" in msg and not ours:
            return "own: import", first
        return "fluidjax: missing module path", first
    if t in ("FileNotFoundError", "IOError", "OSError") or (
            t == "AssertionError" and re.search(r"exist|not found|No such file", msg, re.I)):
        return "data: not supplied", first
    if re.search(r"urlopen|download|HTTPError|URLError|Name or service not known", msg + err.get("traceback", "")[-800:]):
        return "data: download", first
    if t == "UnicodeDecodeError" or ("bytes" in msg and "str" in msg and not ours):
        return "own: Python 2 str/bytes", first
    if t == "NameError" and re.search(r"'(xrange|unicode|raw_input|reduce|long|basestring|cmp|file)'", msg):
        return "own: Python 2 builtin", first
    if t == "AttributeError" and "'NoneType' object has no attribute 'persistable'" in msg:
        return "fluidjax: None where Fluid returns a Variable", first   # e.g. optimizer._global_learning_rate()
    call = " ".join((err.get(k) or "").split(": ", 1)[-1] for k in ("innermost", "script_line"))
    if not ours and t == "TypeError" and re.search(r"fluid|layers\.|optimizer|unique_name", call) and re.search(
            r"unexpected keyword argument|positional argument|required positional", msg):
        ours = True                           # a fluidjax function refused the script's arguments
    if not ours:
        if t == "AttributeError" and re.search(r"'(dict|dict_keys|dict_values|dict_items|map|filter|zip|range)' object", msg):
            return "own: Python 2 semantics", first
        return f"script-side: {t}", first
    if t == "AttributeError" and re.search(r"module '(fluidjax|paddle)[^']*' has no attribute", msg):
        return "fluidjax: missing name", first
    if t == "TypeError" and "unexpected keyword argument" in msg:
        return "fluidjax: keyword", first
    if t == "TypeError" and re.search(r"missing \d+ required|takes \d+ positional|positional argument", msg):
        return "fluidjax: signature", first
    if "actual_shape" in msg or ("out_shape" in msg and "run-time" in msg):
        return "fluidjax: not offered (a shape known only at run time)", first
    if t == "UnregisteredOpError" or "no JAX rule" in msg or "not registered" in msg:
        return "fluidjax: op missing", first
    if t in ("NotOfferedError", "NotImplementedError"):
        return "fluidjax: not offered", first
    if t in ("ShapeError", "InputTypeError"):
        return "fluidjax: shape rule", first
    if t in ("LoDError", "LoDTypeError"):
        return "fluidjax: LoD", first
    if t == "FeedError":
        return "fluidjax: feed", first
    return f"fluidjax: {t}", first


# -- running --------------------------------------------------------------------------------------
# fluid.require_version: missing in fluidjax; most PaddleNLP/PaddleRec scripts call it first and
# sys.exit(1) when it raises. The child gives it a recorded no-op (reported per script: 'stubbed').
STUBS = ["require_version"]


def shim_extra() -> dict:
    """benchmarks/corpus_shim/'s files (relative path -> text), added to the book's shim."""
    root = os.path.join(HERE, "corpus_shim")
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path) as fh:
                    out[os.path.relpath(path, root)] = fh.read()
    # paddle.dataset imports its image module too (the book's shim lists only its datasets)
    out["paddle/dataset/__init__.py"] = book_scripts.SHIM["paddle/dataset/__init__.py"] + "from . import image  # noqa\n"
    return out


def run_one(spec: dict, corpus: str, shim: str, python: str, timeout: float, logs: str) -> dict:
    """Prepare the synthetic data a spec names, fill its {data} flags and run it (book_scripts)."""
    data = os.path.join(logs, "data", spec["name"])
    os.makedirs(data, exist_ok=True)
    os.environ.setdefault("FLUID_CORPUS", corpus)       # synthesizers that copy the corpus' own samples
    if spec.get("data"):
        DATA[spec["data"]](data)
    if spec.get("in_data"):
        # relative data paths of the script resolve in the scratch folder: it links the script's
        # folder's entries (code, configs) and the runner's synthetic files sit beside them
        src = os.path.dirname(os.path.join(corpus, spec["path"]))
        for entry in os.listdir(src):
            if not os.path.exists(os.path.join(data, entry)):
                os.symlink(os.path.join(src, entry), os.path.join(data, entry))
        spec = dict(spec, cwd=data)
    run = dict(spec, args=[a.replace("{data}", data) for a in spec.get("args", [])], data=spec.get("book", {}),
               env={"CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu", "BOOK_STUBS": ",".join(STUBS),
                    **spec.get("env", {})})
    r = book_scripts.run_script(corpus, run, shim, python, min(timeout, spec.get("timeout", timeout)), logs)
    r["_script_dir"] = os.path.dirname(os.path.join(corpus, spec["path"]))
    r["target"], r["path"], r["endless"] = spec["target"], spec["path"], spec.get("endless", False)
    r["class"], r["reason"] = classify(r)
    return r


def _loss(r: dict) -> str:
    progs = [p for p in r.get("programs", []) if p["steps"]]
    if not progs:
        return "-"
    p = max(progs, key=lambda p: p["steps"])
    return f"{p['steps']} steps, {book_scripts._fmt(p['first'])} -> {book_scripts._fmt(p['last'])}"


def _cell(s: str | None, n: int = 150) -> str:
    s = (s or "").replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"


def markdown(results: list) -> str:
    """The docs table: script, target, result, steps/loss, wall, RSS, first error and where."""
    ran = sum(r["class"].startswith("ran") for r in results)
    lines = [f"{ran}/{len(results)} ran to the end.", "",
             "| script | target | result | steps: loss first -> last | wall s | RSS MB | first error (script line; fluidjax line) |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        err = r.get("error") or {}
        where = "; ".join(x for x in (err.get("script_line"), err.get("fluidjax_line")) if x)
        first = f"{err.get('type', '')}: {r['reason']}" if err else r["reason"]
        if err.get("ops_built"):
            first = f"[{err['ops_built']} ops built] " + first
        used = [k for k, v in (r.get("stubbed") or {}).items() if v]
        result = r["class"] + (f" (stub: {', '.join(used)})" if used else "")
        lines.append(f"| {r['name']} | {r['target']} | {result} | {_loss(r)} | {r['wall_s']} | "
                     f"{r.get('peak_rss_mb') or '-'} | {_cell(first)}{' — ' + _cell(where, 120) if where else ''} |")
    return "\n".join(lines) + "\n"


def failure_classes(results: list) -> str:
    """Distinct failure classes with counts and one example each."""
    groups = collections.OrderedDict()
    for r in sorted(results, key=lambda r: r["class"]):
        if not r["class"].startswith("ran"):
            groups.setdefault(r["class"], []).append(r)
    lines = []
    for cls, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        e = rs[0].get("error") or {}
        lines.append(f"- {cls}: {len(rs)} ({', '.join(r['name'] for r in rs)}); e.g. {rs[0]['name']}: "
                     f"{e.get('fluidjax_line') or e.get('script_line') or ''} — {rs[0]['reason'][:200]}")
    return "\n".join(lines)


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["prepare"]:
        ap = argparse.ArgumentParser(prog="fluid_corpus.py prepare", description=prepare.__doc__)
        ap.add_argument("--git", required=True, help="a git directory of PaddlePaddle/models (bare is fine)")
        ap.add_argument("--out", required=True)
        ns = ap.parse_args(argv[1:])
        prepare(ns.git, ns.out)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=os.environ.get("FLUID_CORPUS"),
                    help="the prepared corpus (default $FLUID_CORPUS); see 'prepare'")
    ap.add_argument("--only", action="append", help="run only these names (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the scripts and exit")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="scripts run at once")
    ap.add_argument("--timeout", type=float, default=420, help="seconds per script")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--logs", default=None, help="folder for logs, records and data (default: temporary)")
    ap.add_argument("--json", default=None, help="write every result here")
    ap.add_argument("--markdown", default=None, help="write the results table (markdown) here")
    ap.add_argument("--from-json", action="append",
                    help="classify and tabulate results saved by earlier --json runs (runs nothing); "
                         "repeatable: a later file's result for a script replaces an earlier one")
    ns = ap.parse_args(argv)
    if ns.from_json:
        by_name = {}
        for path in ns.from_json:
            with open(path) as f:
                by_name.update({r["name"]: r for r in json.load(f)})
        order = {s["name"]: i for i, s in enumerate(SCRIPTS)}
        results = sorted(by_name.values(), key=lambda r: order.get(r["name"], len(order)))
        for r in results:
            if r.get("class") != "runner error":
                r["class"], r["reason"] = classify(r)
        if ns.markdown:
            with open(ns.markdown, "w") as f:
                f.write(markdown(results))
        print(markdown(results) + "\nFailure classes:\n" + failure_classes(results))
        return 0
    if ns.list:
        for s in SCRIPTS:
            print(f"{s['name']:28s} {s['target']:28s} {s['path']}")
        return 0
    if not ns.corpus or not os.path.isdir(ns.corpus):
        ap.error("no corpus: pass --corpus DIR or set FLUID_CORPUS (make one with "
                 "'python benchmarks/fluid_corpus.py prepare --git MODELS_GIT_DIR --out DIR')")
    specs = [s for s in SCRIPTS if not ns.only or s["name"] in ns.only]
    unknown = set(ns.only or ()) - {s["name"] for s in SCRIPTS}
    if unknown:
        ap.error(f"unknown script names: {sorted(unknown)}")
    logs = os.path.abspath(ns.logs or tempfile.mkdtemp(prefix="corpus_logs_"))
    os.makedirs(logs, exist_ok=True)
    shim = book_scripts.write_shim(tempfile.mkdtemp(prefix="corpus_shim_"), ns.python, shim_extra())
    results = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, ns.jobs)) as pool:
            futures = [pool.submit(run_one, s, os.path.abspath(ns.corpus), shim, ns.python, ns.timeout, logs)
                       for s in specs]
            for spec, fut in zip(specs, futures):
                try:
                    r = fut.result()
                except Exception as exc:                     # the runner's own failure: one row, go on
                    r = {"name": spec["name"], "rc": None, "wall_s": 0, "log": None, "batch": None, "overrides": {},
                         "target": spec["target"], "path": spec["path"], "class": "runner error",
                         "reason": f"{type(exc).__name__}: {exc}"[:300], "error": None}
                results.append(r)
                print(book_scripts.describe(r) + f"\n   class: {r['class']}  {r['reason'][:200]}", flush=True)
                if ns.json:                                  # kept current: a stopped run keeps its results
                    with open(ns.json, "w") as f:
                        json.dump(results, f, indent=1)
    finally:
        shutil.rmtree(shim, ignore_errors=True)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(results, f, indent=1)
    if ns.markdown:
        with open(ns.markdown, "w") as f:
            f.write(markdown(results))
    print("\n" + markdown(results))
    print("Failure classes:\n" + failure_classes(results))
    print(f"logs in {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
