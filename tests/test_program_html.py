"""A program's HTML view nests each sub-block inside the row of the op that runs it."""

import re

import fluidjax as fj
from fluidjax import layer


def _loop_in_branch_program():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[4])
        n = layer.fill_constant([1], "int64", 3)

        def looped():
            i = layer.fill_constant([1], "int64", 0)
            _, h = layer.while_loop(lambda i, h: layer.less_than(i, n),
                                    lambda i, h: [layer.increment(i, 1, in_place=False), h * 2.0], [i, x])
            return h

        total = layer.reduce_sum(x)
        y = layer.cond(layer.greater_than(total, layer.fill_constant([1], "float32", 0.0)), looped, lambda: x * -1.0)
    return main, y


def _details_of(html: str, summary: str) -> str:
    """The markup of the <details> element whose summary starts with ``summary``."""
    start = html.rindex("<details", 0, html.index(summary))
    depth, pos = 0, start
    for tag in re.finditer(r"</?details", html[start:]):
        depth += -1 if tag.group().startswith("</") else 1
        if depth == 0:
            return html[start:start + tag.end()]
    raise AssertionError("unbalanced <details>")


def test_sub_blocks_are_nested_under_their_ops():
    main, _ = _loop_in_branch_program()
    html = main._repr_html_()
    tables = html[html.index("<h4>Block 0"):]
    assert tables.count("<details") == tables.count("</details>") == main.num_blocks - 1
    summaries = re.findall(r"<summary>Block (\d+) \(\d+ ops, run by this (\w+)\)</summary>", tables)
    owners = {int(b): t for b, t in summaries}
    assert len(owners) == main.num_blocks - 1               # every sub-block shown once, under its owner
    while_block = next(b for b, t in owners.items() if t == "while")
    # The loop's block sits inside the true branch's block: its <details> opens inside the branch's.
    branch = next(b for b, t in owners.items() if t == "conditional_block"
                  and main.blocks[while_block].parent_idx == b)
    inside_branch = _details_of(tables, f"<summary>Block {branch} ")
    assert f"<summary>Block {while_block} " in inside_branch
    assert "no op runs it" not in tables


def test_a_block_no_op_runs_is_listed_after_block_0():
    main = fj.Program()
    main.create_block()
    main.rollback()
    assert "<h4>Block 1 (parent 0; no op runs it)</h4>" in main._repr_html_()
