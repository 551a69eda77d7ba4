"""The README's result tables read back against the committed results they quote: the laws' out-of-sample scores
(results/laws/*.json through heads.laws.score), the size and power tables (results/verdict/laws_calibration.json)
and the state counts of the shipped model quoted in docs/RESULTS.md. A number that drifts from its results file
fails here, not in a reader's hands."""
import json
import os
import re

import pytest

from foxwindow.heads import laws as headlaws

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAWS_DIR = os.path.join(ROOT, "results", "laws")
README = os.path.join(ROOT, "README.md")


def _load(*parts):
    with open(os.path.join(ROOT, *parts)) as fh:
        return json.load(fh)


def _table(text, header_start):
    """The rows (lists of cell strings) of the markdown table whose header line starts with header_start."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


@pytest.fixture(scope="module")
def readme():
    with open(README) as fh:
        return fh.read()


LAW_ROWS = {"iid two-moment": "iid", "dependent (Geyer's tau)": "dependent",
            "finite n, V(n) at n = L/kappa": "finite_n", "document mixture": "mixture",
            "block bootstrap (reference)": "bootstrap"}


def _law_of(label):
    if label.startswith("**three_cumulant**"):
        return "three_cumulant"
    return LAW_ROWS[label]


def test_readme_law_table_is_the_score_of_the_committed_results(readme):
    sc = {n: headlaws.score(_load("results", "laws", f"{n}.json"))
          for n in ("fox_heads", "lstm_heads", "fox_heads_256", "lstm_heads_256")}
    rows = _table(readme, "| law | FoX (16 heads), 32 documents")
    assert {_law_of(r[0]) for r in rows} == set(LAW_ROWS.values()) | {"three_cumulant"}
    for r in rows:
        law = _law_of(r[0])
        fox, lstm, fox2, lstm2 = (sc[n][law] for n in ("fox_heads", "lstm_heads", "fox_heads_256", "lstm_heads_256"))
        assert r[1] == f"{fox['med_rel_mean']:.3f}", (law, r[1])
        assert r[2] == f"{fox['med_rel_var']:.3f}" and r[3] == f"{fox['within_2se']:.2f}", (law, r[2:4])
        assert r[4] == f"{lstm['med_rel_var']:.3f}" and r[5] == f"{lstm['within_2se']:.2f}", (law, r[4:6])
        assert r[6] == f"{fox2['med_rel_var']:.3f}, {fox2['within_2se']:.2f}", (law, r[6])
        assert r[7] == f"{lstm2['med_rel_var']:.3f}, {lstm2['within_2se']:.2f}", (law, r[7])


FAMILY_ROWS = {"iid": "iid", "AR(1) logits": "ar1", "ARMA, sign-changing autocorrelation": "arma_sign_changing",
               "regime switching": "regime_switching", "word-boundary gates": "word_gates"}
POWER_ROWS = {"long regimes": "long_regimes", "word-boundary gates": "word_gates",
              "saturating (g = 1 stretches)": "saturating", "document rates": "document_rates"}


def _share(cells, key):
    c = cells.get(key)
    return None if not c or not sum(c.values()) else c["false"] / sum(c.values())


def test_readme_size_table_is_the_committed_calibration(readme):
    res = _load("results", "verdict", "laws_calibration.json")["results"]
    rows = _table(readme, "| family | kind | null cells (20 runs)")
    seen = set()
    for r in rows:
        if r[0] not in FAMILY_ROWS:                           # the row of the families without null cells
            fams = [f.strip().replace(" ", "_") for f in r[0].split(",")]
            for f in fams:
                assert sum(sum(v.values()) for k, v in res[f]["cells"].items() if k.endswith("|null")) == 0, f
                assert res[f]["runs_any_false"] == 20, f
                seen.add(f)
            continue
        f = FAMILY_ROWS[r[0]]
        seen.add(f)
        null = sum(sum(v.values()) for k, v in res[f]["cells"].items() if k.endswith("|null"))
        assert r[1] == ("null" if res[f]["null"] else "power") and r[2] == str(null), (f, r)
        assert r[3] == f"{res[f]['runs_any_false_on_null']} of {res[f]['reps']}", (f, r[3])
        assert r[4].split()[0] == str(res[f]["runs_any_false"]), (f, r[4])
    assert seen == set(res)                                  # every family of the study, once


def test_readme_power_table_is_the_committed_calibration(readme):
    res = _load("results", "verdict", "laws_calibration.json")["results"]
    band = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4)

    def at_eps(fam, law):
        c = {s: 0 for s in headlaws.STATES}
        for e in band:
            for s, v in res[fam]["cells_eps"].get(f"{law}|off|{e:g}", {}).items():
                c[s] += v
        return c["false"] / sum(c.values()) if sum(c.values()) else None

    rows = _table(readme, "| power family | marginal (of all off cells)")
    assert {POWER_ROWS[r[0]] for r in rows} == set(POWER_ROWS.values())
    for r in rows:
        f = POWER_ROWS[r[0]]
        cells = res[f]["cells"]
        assert r[1] == f"{_share(cells, 'marginal|off'):.2f}", (f, r[1])
        iid = cells["iid|off"]
        claimed = {s: v for s, v in iid.items() if s != "not claimed"}
        want = f"{_share(cells, 'iid|off'):.2f} / {_share({'x': claimed}, 'x'):.2f} / {at_eps(f, 'iid'):.2f}"
        assert r[2] == want, (f, r[2], want)
        lead = _share(cells, "three_cumulant|off")
        assert r[3] == ("no off cell" if lead is None else f"{lead:.2f} / {at_eps(f, 'three_cumulant'):.2f}"), (f, r[3])


def test_results_md_state_counts_are_the_shipped_models():
    doc = _load("results", "laws", "fox_heads.json")
    states = headlaws.score(doc)
    with open(os.path.join(ROOT, "docs", "RESULTS.md")) as fh:
        text = " ".join(fh.read().split())
    lead = states["three_cumulant"]["states"]
    m = re.search(r"the lead law \(three_cumulant\) holds in (\d+), is false in (\d+) .*? and is undetermined in (\d+)",
                  text)
    assert m and tuple(map(int, m.groups())) == (lead["holds"], lead["false"], lead["undetermined"])
    m = re.search(r"The iid law is false in (\d+) cells \(\d+ heads\) and holds in (\d+)", text)
    assert m and tuple(map(int, m.groups())) == (states["iid"]["states"]["false"], states["iid"]["states"]["holds"])
    m = re.search(r"marginal law \(exact for independent steps\) is false in (\d+)", text)
    assert m and int(m.group(1)) == states["marginal"]["states"]["false"]


def _scores_md(*parts):
    """A results/*/scores.md (the per-law scores of a run whose JSON is not committed): {law: row cells} of its
    score table, and its heads line's counts {"explained": {...}, "false": {...}} with its sampling floor (the
    median error of a law exact in population)."""
    with open(os.path.join(ROOT, "results", *parts, "scores.md")) as fh:
        text = fh.read()
    floor = re.search(r"([0-9.]+) for a law exact in population", text)
    rows = {r[0]: r[1:] for r in _table(text, "| law | ")}
    line = next(ln for ln in text.splitlines() if ln.startswith("Heads: "))

    def counts(part):
        return {k.rsplit(" ", 1)[0]: int(k.rsplit(" ", 1)[1]) for k in part.split(", ") if k != "none"}
    m = re.match(r"Heads: (\d+); Var\[W\] explained by: (.*); false at some eps: (.*)$", line)
    return rows, dict(heads=int(m.group(1)), explained=counts(m.group(2)), false=counts(m.group(3)),
                      floor=floor and floor.group(1))


def test_readme_numbers_of_the_full_lstm_and_the_gru_are_their_scores(readme):
    text = " ".join(readme.split())
    lstm, lc = _scores_md("lstm", "all_units")
    gru, gc = _scores_md("gru")
    pct = lambda v: f"{100 * float(v):.1f}%" if float(v) < 0.1 else f"{100 * float(v):.0f}%"    # noqa: E731
    lead, boot = lstm["three_cumulant"], lstm["bootstrap"]
    assert (f"the lead law is off by a median {pct(lead[0])} of Var[W] (the bootstrap {pct(boot[0])}), within 2 SE "
            f"on {lead[2].split(' of ')[0]} of the cells, coverage {float(lead[3]):.2f}, false on "
            f"{lc['false']['three_cumulant']} units") in text
    assert (f"it is off by a median {pct(gru['three_cumulant'][0])} (the bootstrap {pct(gru['bootstrap'][0])}; "
            f"sampling alone {pct(gc['floor'])}), false on {gc['false']['three_cumulant']} of the {gc['heads']} "
            "units, and no law explains any unit's variance") in text
    assert gc["explained"] == {"no law": gc["heads"]} and lc["heads"] == 256


def test_models_md_unit_counts_are_the_scores():
    with open(os.path.join(ROOT, "docs", "MODELS.md")) as fh:
        text = fh.read()
    rows = {r[0]: r[-1] for r in _table(text, "| 256 units | kappa 10% / 50% / 90%")}
    names = {"reactionrnn GRU (hard sigmoid, the trained network)": ("gru",),
             "reactionrnn GRU read with logistic gates": ("gru", "sigmoid_reading"),
             "textgenrnn LSTM (forget gates)": ("lstm", "all_units")}
    assert set(rows) == set(names)
    for label, parts in names.items():
        _, c = _scores_md(*parts)
        explained, false = rows[label].split("; false on ")
        got = {k.rsplit(" ", 1)[0].replace("the lead law", "three_cumulant"): int(k.rsplit(" ", 1)[1])
               for k in explained.split(", ")}
        assert got == c["explained"] and int(false) == c["false"].get("three_cumulant", 0), (label, rows[label])
