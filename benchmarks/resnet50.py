"""ResNet-50 (ImageNet: 3x224x224, 1000 classes) built with fluidjax's layers: conv 7x7/2 + batch
norm + relu, max-pool 3x3/2, bottleneck blocks 3-4-6-3 (1x1, 3x3, 1x1 with 4x expansion; a 1x1
projection on the shortcut where the shape changes), global average pool, fc. About 25.6 M
parameters. Used by benchmarks/draw.py and the drawing and summary tests."""

from __future__ import annotations

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))   # (width, blocks, first stride)
EXPANSION = 4


def _conv_bn(layer, h, filters, size, stride, relu):
    h = layer.conv2d(h, num_filters=filters, filter_size=size, stride=stride, padding=(size - 1) // 2,
                     bias_attr=False)
    return layer.batch_norm(h, activation="relu" if relu else None)


def resnet50(layer, img, classes: int = 1000):
    """ResNet-50 logits of ``img`` (NCHW)."""
    h = _conv_bn(layer, img, 64, 7, 2, relu=True)
    h = layer.pool2d(h, pool_size=3, pool_type="max", pool_stride=2, pool_padding=1)
    channels = 64
    for width, blocks, first_stride in STAGES:
        for b in range(blocks):
            stride = first_stride if b == 0 else 1
            y = _conv_bn(layer, h, width, 1, 1, relu=True)
            y = _conv_bn(layer, y, width, 3, stride, relu=True)
            y = _conv_bn(layer, y, width * EXPANSION, 1, 1, relu=False)
            short = h
            if stride != 1 or channels != width * EXPANSION:
                short = _conv_bn(layer, h, width * EXPANSION, 1, stride, relu=False)
            h = layer.relu(layer.elementwise_add(y, short))
            channels = width * EXPANSION
    h = layer.pool2d(h, pool_type="avg", global_pooling=True)
    return layer.fc(h, classes)


def resnet50_program(train: bool = False, image=(3, 224, 224), classes: int = 1000):
    """``(main, startup)`` of ResNet-50; ``train`` adds softmax cross entropy and Momentum."""
    import fluidjax as fj
    from fluidjax import layer

    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        img = layer.data("img", shape=list(image))
        logits = resnet50(layer, img, classes)
        if train:
            label = layer.data("label", dims=1, dtype="int64")
            loss = layer.mean(layer.softmax_with_cross_entropy(logits, label))
            fj.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
    return main, startup
