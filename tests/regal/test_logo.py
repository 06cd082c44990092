"""LOGO: the turtle's geometry, `vis_compare`'s identities, and every released LOGO program rendered twice."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zoo.regal.domains import runtime_source
from zoo.regal.examples import read_jsonl
from zoo.regal.logo import render, same_image, vis_compare


def trace(program: str) -> list[tuple]:
    """Our own trusted programs only (the product never executes LOGO code in-process)."""
    scope: dict = {}
    exec(runtime_source("logo") + "\n" + program, scope)
    return scope["_regal_turtle"].segments


def test_turtle_square_closes_and_embed_restores_state():
    segs = trace("for i in range(4):\n    forward(10)\n    left(90.0)")
    assert len(segs) == 4
    assert segs[0] == pytest.approx((0, 0, 10, 0))
    assert segs[1][2:] == pytest.approx((10, 10))
    assert segs[-1][2:] == pytest.approx((0, 0), abs=1e-12)
    segs = trace('left(30)\nembed("""forward(5)\nleft(90)\nforward(5)""", locals())\nforward(2)')
    # after embed the turtle is back at the origin facing 30 degrees
    assert segs[-1] == pytest.approx((0, 0, 2 * math.cos(math.pi / 6), 2 * math.sin(math.pi / 6)))
    assert trace("penup()\nforward(3)\npendown()\nforward(1)") == pytest.approx([(3, 0, 4, 0)])


def test_embed_inside_a_helper_sees_the_primitives():
    segs = trace('def arm(n):\n    embed("""for i in range(n):\n    forward(1)""", locals())\narm(3)')
    assert len(segs) == 3


def test_circle_constants_close_a_circle():
    segs = trace("for i in range(HALF_INF):\n    forward(EPS_DIST*4)\n    left(EPS_ANGLE)\n" * 2)
    assert len(segs) == 126
    end = segs[-1][2:]
    # 126 * 2.86 = 360.36 degrees: the official circle closes to within one step
    assert math.dist(end, (0, 0)) < 4 * (1 / 20) * 1.5


def test_vis_compare_identities():
    a = np.full((10, 10), 255, np.uint8)
    b = a.copy()
    a[2, 2:6] = 0
    b[2, 2:4] = 0
    assert vis_compare(a, a) == 1.0
    assert vis_compare(a, b) == pytest.approx(2 / 4)  # 4 inked pixels in either, 2 equal
    assert vis_compare(a, None) == 0.0 and vis_compare(None, a) == 0.0
    blank = np.full((10, 10), 255, np.uint8)
    assert vis_compare(blank, blank) == 1.0  # documented deviation (officially nan)
    c = a.copy()
    c[2, 2] = 100  # a gray pixel differs from black
    assert vis_compare(a, c) == pytest.approx(3 / 4)


def test_render_is_deterministic_and_sensitive():
    segs = trace("for i in range(5):\n    forward(8)\n    left(72.0)")
    img1, img2 = render(segs), render(segs)
    assert img1.shape == (2000, 2000) and img1.dtype == np.uint8
    assert np.array_equal(img1, img2) and vis_compare(img1, img2) == 1.0
    assert (img1 < 255).sum() > 1000
    other = render(trace("for i in range(5):\n    forward(8)\n    left(70.0)"))
    assert vis_compare(img1, other) < 0.98


@pytest.mark.parametrize("file, n", [("train_200.jsonl", 200), ("test.jsonl", 111), ("dev_100.jsonl", 100)])
def test_every_released_logo_program_renders_identically_in_two_sandbox_runs(shared_data, executors, file, n):
    ex = executors("logo")
    examples = read_jsonl(shared_data / "regal" / "logo" / file, "logo", file)
    assert len(examples) == n
    first = ex.run([(e["program"], "", e) for e in examples])
    second = ex.run([(e["program"], "", e) for e in examples])
    assert all(o.ok for o in first), [o.reason for o in first if not o.ok][:3]
    assert [o.result for o in first] == [o.result for o in second]  # bit-identical strokes (float64 bytes)
    dom = ex.domain
    for a, b in list(zip(first, second))[::25]:  # rendered (20 dpi here; full resolution below) from each run
        img = dom.image(a)
        assert (img < 255).any() and vis_compare(img, dom.image(b)) == 1.0


@pytest.mark.parametrize("change", ["count", "angle"])
def test_visibly_altered_programs_score_below_the_threshold(shared_data, executors, change):
    ex = executors("logo")
    examples = read_jsonl(shared_data / "regal" / "logo" / "train_200.jsonl", "logo", "train", limit=60)
    picked = [e for e in examples if "range(5)" in e["program"] and "72.0" in e["program"]][:2]
    assert picked
    for e in picked:
        altered = e["program"].replace("range(5)", "range(4)", 1) if change == "count" else \
            e["program"].replace("72.0", "60.0", 1)
        gold, alt = ex.run([(e["program"], "", e), (altered, "", e)])
        img_gold, img_alt = render(ex.domain.segments(gold)), render(ex.domain.segments(alt))  # official resolution
        assert vis_compare(img_gold, img_alt) < 0.98 and not same_image(img_gold, img_alt)
        assert same_image(img_gold, render(ex.domain.segments(gold)))
