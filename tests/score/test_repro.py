"""The CPU reproduction (long-tailed digits, two-stage SCoRe vs CE) runs end to end on a miniature setting."""

from __future__ import annotations

from zoo.score import repro


def test_repro_prints_the_table(capsys):
    repro.main(["--irs", "10", "--seeds", "1", "--epochs", "1", "--methods", "CE", "SCoRe-FL (C_f)"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 10 |")]
    assert [r.split(" | ")[1] for r in rows] == ["CE", "SCoRe-FL (C_f)"]
    for r in rows:  # accuracies are percentages
        cells = [float(c.split(" ± ")[0]) for c in r.strip("| \n").split(" | ")[2:]]
        assert len(cells) == 4 and all(0 <= c <= 100 for c in cells)
