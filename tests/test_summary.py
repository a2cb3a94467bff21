"""program.summary(): parameter counts against the arrays the startup program really creates,
FLOPs of mul / matmul / conv2d against hand-computed values, ResNet-50 against its known size."""

import os
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir.summary import summarize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def _build(fn):
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        fn()
    return main, startup


def _lenet():
    img = layer.data("img", shape=[1, 28, 28])
    h = layer.relu(layer.conv2d(img, num_filters=6, filter_size=5, padding=2))
    h = layer.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
    h = layer.batch_norm(layer.conv2d(h, num_filters=16, filter_size=5), activation="relu")
    h = layer.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
    h = layer.fc(h, output_size=120, activation="relu")
    logits = layer.fc(h, output_size=10)
    label = layer.data("label", dims=1, dtype="int64")
    loss = layer.mean(layer.softmax_with_cross_entropy(logits, label))
    fj.optimizer.Adam(learning_rate=1e-3).minimize(loss)


def test_parameter_counts_match_the_arrays_in_the_scope():
    main, startup = _build(_lenet)
    scope = fj.Scope()
    fj.Executor(fj.CPUPlace()).run(startup, scope=scope)
    s = summarize(main)
    params = {p.name: p for p in main.all_parameters()}
    for row in s.rows:
        mine = [n for n in params if n.startswith(row.name + ".")]
        sizes = [np.asarray(scope.find_var(n).get_tensor()).size for n in mine]
        assert row.params == sum(sizes), row.name
    total = sum(np.asarray(scope.find_var(n).get_tensor()).size for n in params)
    assert s.total_params == total
    trainable = sum(np.asarray(scope.find_var(n).get_tensor()).size for n, p in params.items() if p.trainable)
    assert s.trainable_params == trainable < total      # batch norm's moving mean/variance are not
    assert s.param_bytes == 4 * total
    assert s.hidden_ops > 0 and "backward/optimizer ops not counted" in str(s)


def test_flops_of_mul_by_hand():
    def build():
        x = layer.data("x", input_size=784)
        layer.fc(x, output_size=100, activation="relu")
    main, _ = _build(build)
    (row,) = summarize(main).rows
    assert row.name == "fc_0" and row.ops == ["mul", "elementwise_add", "relu"]
    assert row.flops == 2 * 784 * 100 + 100 + 100
    assert row.output_shape == (-1, 100)


def test_flops_of_matmul_by_hand():
    def build():
        a = layer.data("a", shape=[4, 6])
        b = layer.data("b", shape=[6, 5])
        layer.matmul(a, b)
    main, _ = _build(build)
    (row,) = summarize(main).rows
    assert row.flops == 2 * 4 * 6 * 5


@pytest.mark.parametrize("groups", [1, 2])
def test_flops_of_conv2d_by_hand(groups):
    def build():
        img = layer.data("img", shape=[4, 32, 32])
        layer.conv2d(img, num_filters=8, filter_size=5, stride=1, padding=0, groups=groups, bias_attr=False)
    main, _ = _build(build)
    (row,) = summarize(main).rows
    h_out = w_out = 32 - 5 + 1
    assert row.flops == 2 * (4 // groups) * 5 * 5 * 8 * h_out * w_out
    assert row.params == 8 * (4 // groups) * 5 * 5
    assert row.output_shape == (-1, 8, h_out, w_out)


def test_unknown_dims_make_flops_unknown_not_wrong():
    def build():
        x = layer.data("x", shape=[-1, -1, 8])  # rows per example unknown (the batch dim is given: Fluid's rule)
        y = layer.data("y", shape=[8, -1])
        layer.matmul(x, y)
    main, _ = _build(build)
    s = summarize(main)
    assert s.rows[0].flops is None and not s.flops_known
    assert "unknown" in str(s)


def test_resnet50_has_its_published_size():
    from resnet50 import resnet50_program

    main, _ = resnet50_program()
    s = summarize(main)
    # torchvision's resnet50: 25,557,032 trainable parameters; plus batch norm's moving statistics
    assert s.trainable_params == 25_557_032
    assert s.total_params - s.trainable_params == 2 * 26_560
    # 4.1 G multiply-adds per 224x224 image (He et al. 2015, table 1: 3.8e9 counts the convs only)
    assert 8.0e9 < s.total_flops < 8.4e9


def test_summary_prints_text_and_renders_html(capsys):
    main, _ = _build(_lenet)
    main.summary()
    text = capsys.readouterr().out
    assert "fc_1 (fc)" in text and "Total params:" in text and "conv2d_0 (conv2d)" in text
    lines = []
    main.summary(print_fn=lines.append)
    assert lines == [text.rstrip("\n")]
    html = summarize(main)._repr_html_()
    table = ET.fromstring(html[:html.index("</table>") + len("</table>")])
    assert len(table.findall("tr")) == 1 + len(summarize(main).rows)
