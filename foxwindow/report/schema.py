"""The one reader of the per-head result JSON (schema 1): every name of a JSON field the report, the plots
and the comparison use is written here and nowhere else, so a renamed field is a one-line change.

    read(obj)       a Result from a schema-1 dict, a path to its JSON file, or anything with to_json()
                    (the analysis result object); the earlier {info, heads} JSON of `forget.py --json` is
                    converted on the way in (legacy.py). ValueError naming the missing or bad field.
    Result, Head, At, LawAt, Pmf, ...   plain dataclasses: the rest of the package reads only these.

Law states are one of STATES; a head's state of one law over all its eps is `overall_state`.
"""
import json
import math
import os
from dataclasses import dataclass, field

from foxwindow import safety
from foxwindow.report import legacy

__all__ = ["SCHEMA_VERSION", "KIND", "STATES", "REFERENCE_LAW", "UNIT_WORDS", "MISSING", "Source", "LawInfo",
           "Measured", "Oos", "LawAt", "At", "Dist", "Pmf", "Dependence", "Mass", "Summary", "Head", "Result",
           "overall_state", "PREDICTION_SCORES", "from_dict", "as_dict", "read"]

SCHEMA_VERSION = 1
KIND = "heads"
STATES = ("holds", "false", "undetermined", "not claimed")
REFERENCE_LAW = "bootstrap"             # the reference resampler: drawn, never given a verdict colour
UNIT_WORDS = {"head": "head", "unit": "unit", "channel": "channel"}
MISSING = object()


# ----------------------------------------------------------------------------- the parsed result


@dataclass
class Source:
    what: str = "?"
    path: str | None = None
    family: str = "?"
    unit: str = "head"
    n_seq: int | None = None
    seq_len: int | None = None
    seed: int | None = None
    split: str | None = None


@dataclass
class LawInfo:
    label: str
    description: str = ""


@dataclass
class Measured:
    mean: float | None
    var: float | None
    mean_se: float | None = None
    var_se: float | None = None
    censored_share: float = 0.0
    quantiles: dict = field(default_factory=dict)       # {"0.05": w, ...}
    is_bound: bool = False                              # the mean is a lower bound (censored windows)

    @property
    def bound(self):
        """The mean is a lower bound: some windows reach the sequence start."""
        return self.is_bound or self.censored_share > 0


@dataclass
class Oos:
    """The out-of-sample score of a law's prediction (fit on half the documents, scored on the other)."""
    coverage: float | None = None
    coverage_se: float | None = None
    z_mean: float | None = None
    z_var: float | None = None
    censored_share: float | None = None


@dataclass
class LawAt:
    mean: float | None = None
    var: float | None = None
    quantiles: dict | None = None
    var_ratio: float | None = None
    var_ratio_ci: list | None = None
    state: str = "not claimed"
    claim: float | None = None
    why: str = ""
    oos: Oos | None = None


@dataclass
class At:
    eps: float
    L: float
    measured: Measured
    laws: dict                                          # law name -> LawAt


@dataclass
class Dist:
    offset: int
    p: list

    def support(self):
        """The windows W = offset, offset + 1, ... of p."""
        return list(range(self.offset, self.offset + len(self.p)))


@dataclass
class Pmf:
    eps: float
    L: float
    measured: Dist | None                               # None: no measured distribution (censored windows)
    laws: dict                                          # law name -> Dist


@dataclass
class Dependence:
    n: list
    tau_n: list
    tau_n_se: list
    levelled_at: int | None = None


@dataclass
class Mass:
    eps: float
    decay_window: float | None
    mass_window: float | None


@dataclass
class Summary:
    mean_law: str | None = None
    var_law: str | None = None
    var_claim: float | None = None
    false: list = field(default_factory=list)
    text: str = ""


@dataclass
class Head:
    layer: str
    head: int
    label: str
    kappa: float | None
    sigma2: float | None
    tau: float | None
    tau_se: float | None
    summary: Summary
    dependence: Dependence | None
    mass: Mass | None
    at: list                                            # [At], ascending L
    pmf: Pmf | None

    def at_eps(self, eps):
        """The record at threshold eps (matched on L = ln 1/eps); ValueError listing the eps there are."""
        L = math.log(1 / float(eps))
        for a in self.at:
            if abs(a.L - L) <= 1e-6 * max(1.0, L):
                return a
        raise ValueError(f"eps {eps:g} is not in the scan of {self.label}; "
                         f"one of {', '.join(format(a.eps, 'g') for a in self.at)}")

    def state(self, law):
        return overall_state([a.laws[law].state for a in self.at if law in a.laws])


@dataclass
class Result:
    source: Source
    lead_law: str | None
    alpha: float | None
    laws: dict                                          # law name -> LawInfo, display order
    heads: list                                         # [Head]
    foxwindow_version: str | None = None
    note: str = ""                                      # e.g. what a converted earlier-format file lacks

    @property
    def unit(self):
        """'head', 'unit' (LSTM units) or 'channel' (fla channels): the word for one row of the result."""
        return UNIT_WORDS.get(self.source.unit, self.source.unit)

    def layers(self):
        """Layer names in order of first appearance."""
        seen = []
        for h in self.heads:
            if h.layer not in seen:
                seen.append(h.layer)
        return seen

    def shown_layers(self, most=12):
        """The layer names for a message: quoted, control characters escaped, the first `most` of them."""
        names = self.layers()
        return ", ".join(repr(safety.shown(n)) for n in names[:most]) + (", ..." if len(names) > most else "")

    def head(self, label):
        """The head named `label`: its label "0.3", or a pair (layer, head) whose layer is the layer's name as
        the result gives it ("layer0", "blocks.0.attn.hook_log_fgate") or its number in the labels (0).
        ValueError listing a few labels, or the layer names where the layer is unknown."""
        if isinstance(label, (tuple, list)) and len(label) == 2:
            return self._head_in(*label)
        for h in self.heads:
            if h.label == str(label):
                return h
        shown = ", ".join(h.label for h in self.heads[:8]) + (", ..." if len(self.heads) > 8 else "")
        raise ValueError(f"no {self.unit} {label!r} in this result ({len(self.heads)} {self.unit}s: {shown})")

    def _head_in(self, layer, head):
        """The head (layer, head) of head(): layer a name or the number of the labels' "number.head"."""
        unit = self.unit
        if isinstance(head, bool) or not hasattr(head, "__index__"):
            raise TypeError(f"head=(layer, {unit}): the {unit} must be an integer index; got {head!r}")
        head = head.__index__()
        if isinstance(layer, str) and layer in self.layers():
            hs = [h for h in self.heads if h.layer == layer]
        elif isinstance(layer, str) or (not isinstance(layer, bool) and hasattr(layer, "__index__")):
            # a layer's number: the part of the labels before the last "." (a number written as a string too)
            num = str(layer.__index__() if not isinstance(layer, str) else layer)
            hs = [h for h in self.heads if h.label.rpartition(".")[0] == num]
            if not hs:
                nums = list(dict.fromkeys(h.label.rpartition(".")[0] for h in self.heads))
                nums = [n for n in nums if n.isdigit()]
                raise ValueError(f"no layer {safety.shown(layer) if isinstance(layer, str) else layer!r} in this "
                                 f"result; its layers: {self.shown_layers()}"
                                 + (f" (numbered {', '.join(nums[:12])}{', ...' if len(nums) > 12 else ''} in the "
                                    "labels)" if nums else ""))
        else:
            raise TypeError(f"head=(layer, {unit}): the layer must be a layer name or its integer index; got "
                            f"{layer!r}")
        for h in hs:
            if h.head == head:
                return h
        have = sorted(h.head for h in hs)
        raise ValueError(f"layer {safety.shown(hs[0].layer)!r} has no {unit} {head} ({unit}s {have[0]}..{have[-1]})")

    def verdict_laws(self):
        """The laws given a state, in display order: the catalogue less the reference, and the reference too
        where the result gives it states."""
        ref = any(a.laws[REFERENCE_LAW].state != "not claimed" for h in self.heads for a in h.at
                  if REFERENCE_LAW in a.laws)
        return [n for n in self.laws if n != REFERENCE_LAW or ref]


def overall_state(states):
    """One state of a law for a head over its eps: false anywhere wins, then holds, then undetermined."""
    states = list(states)
    for s in ("false", "holds", "undetermined"):
        if s in states:
            return s
    return "not claimed"


# ----------------------------------------------------------------------------- reading


class _Reader:
    """Field access with the path in every message: heads[3].at[0].measured.mean."""

    def __init__(self, d, path):
        if not isinstance(d, dict):
            raise ValueError(f"{path or 'the result'}: expected a JSON object; got {type(d).__name__}")
        self.d, self.path = d, path

    def _name(self, key):
        return f"{self.path}.{key}" if self.path else key

    def get(self, key, default=MISSING):
        if key not in self.d:
            if default is MISSING:
                raise ValueError(f"not a schema-{SCHEMA_VERSION} per-head result: field {self._name(key)} missing")
            return default
        return self.d[key]

    def num(self, key, default=MISSING):
        v = self.get(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{self._name(key)}: expected a number or null; got {v!r}")
        if not math.isfinite(v):                # JSON has no NaN or Infinity: the writer puts null there
            raise ValueError(f"{self._name(key)}: expected a finite number or null; got {v!r}")
        return float(v)

    def sub(self, key, default=MISSING):
        v = self.get(key, default)
        return None if v is None else _Reader(v, self._name(key))

    def list(self, key, default=MISSING):
        v = self.get(key, default)
        if v is None:
            return []
        if not isinstance(v, list):
            raise ValueError(f"{self._name(key)}: expected a list; got {type(v).__name__}")
        return v

    def nums(self, key, default=MISSING):
        out = []
        for i, v in enumerate(self.list(key, default)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"{self._name(key)}[{i}]: expected a number or null; got {v!r}")
            out.append(None if v is None or not math.isfinite(v) else float(v))
        return out


def _dist(r):
    """A distribution {offset, p}, or None where the result holds none (e.g. every window censored)."""
    if r is None:
        return None
    off = r.get("offset")
    if isinstance(off, bool) or not isinstance(off, int):
        raise ValueError(f"{r._name('offset')}: expected an integer window; got {off!r}")
    return Dist(offset=off, p=[0.0 if v is None else v for v in r.nums("p")])


def _law_at(r):
    o = r.sub("oos", None)
    cov = r.num("coverage90", None)                     # the out-of-sample coverage of the law's 90% interval
    state = r.get("state", "not claimed") or "not claimed"
    if state not in STATES:
        raise ValueError(f"{r._name('state')}: {state!r} is not one of {', '.join(STATES)}")
    ci = r.get("var_ratio_ci", None)
    return LawAt(mean=r.num("mean", None), var=r.num("var", None), quantiles=r.get("quantiles", None),
                 var_ratio=r.num("var_ratio", None), var_ratio_ci=list(ci) if ci else None, state=state,
                 claim=r.num("claim", None), why=str(r.get("why", "") or ""),
                 oos=(Oos(coverage=o.num("coverage", None), coverage_se=o.num("coverage_se", None),
                          z_mean=o.num("z_mean", None), z_var=o.num("z_var", None),
                          censored_share=o.num("censored_share", None)) if o is not None else
                      Oos(coverage=cov) if cov is not None else None))


def _at(r):
    m = r.sub("measured")
    laws = r.sub("laws", {})
    return At(eps=r.num("eps"), L=r.num("L"),
              measured=Measured(mean=m.num("mean"), var=m.num("var"), mean_se=m.num("mean_se", None),
                                var_se=m.num("var_se", None), censored_share=m.num("censored_share", 0.0) or 0.0,
                                quantiles=m.get("quantiles", None) or {}, is_bound=bool(m.get("mean_is_bound", False))),
              laws={name: _law_at(laws.sub(name)) for name in laws.d})


PREDICTION_SCORES = {"coverage_se": "oos_se_coverage", "z_mean": "oos_z_mean", "z_var": "oos_z_var",
                     "censored_share": "oos_censored"}


def _prediction_scores(pred, at):
    """The reference's out-of-sample z-scores from the head's prediction block (lists over its `at` records)
    into the reference law's Oos, where the law's own record does not hold them."""
    if pred is None:
        return
    for field_name, key in PREDICTION_SCORES.items():
        vals = pred.nums(key, None)
        if len(vals) != len(at):
            continue
        for a, v in zip(at, vals):
            la = a.laws.get(REFERENCE_LAW)
            if la is None or v is None:
                continue
            if la.oos is None:
                la.oos = Oos()
            if getattr(la.oos, field_name) is None:
                setattr(la.oos, field_name, v)


def _head(r):
    s = r.sub("summary", None) or _Reader({}, r._name("summary"))
    dep, mass, pmf = r.sub("dependence", None), r.sub("mass", None), r.sub("pmf", None)
    layer, head = r.get("layer"), r.get("head")
    if isinstance(head, bool) or not isinstance(head, int) or head < 0:
        raise ValueError(f"{r._name('head')}: expected an integer >= 0; got {head!r}")
    if isinstance(layer, (dict, list)) or layer is None:
        raise ValueError(f"{r._name('layer')}: expected a layer name (a string or an integer); got {layer!r}")
    kappa = r.num("kappa", None)
    if kappa is not None and kappa < 0:
        raise ValueError(f"{r._name('kappa')}: {kappa:g} < 0 (kappa is the mean of -log g)")
    raw = [_at(_Reader(a, f"{r._name('at')}[{k}]")) for k, a in enumerate(r.list("at"))]
    _prediction_scores(r.sub("prediction", None), raw)
    at = sorted(raw, key=lambda a: a.L)
    return Head(layer=str(layer), head=int(head), label=str(r.get("label", f"{layer}.{head}")),
                kappa=kappa, sigma2=r.num("sigma2", None), tau=r.num("tau", None),
                tau_se=r.num("tau_se", None),
                summary=Summary(mean_law=s.get("mean_law", None), var_law=s.get("var_law", None),
                                var_claim=s.num("var_claim", None), false=list(s.get("false", None) or []),
                                text=str(s.get("text", "") or "")),
                dependence=None if dep is None else Dependence(
                    n=dep.nums("n"), tau_n=dep.nums("tau_n"), tau_n_se=dep.nums("tau_n_se", None),
                    levelled_at=dep.get("levelled_at", None)),
                mass=None if mass is None else Mass(eps=mass.num("eps"), decay_window=mass.num("decay_window", None),
                                                    mass_window=mass.num("mass_window", None)),
                at=at,
                pmf=None if pmf is None else Pmf(
                    eps=pmf.num("eps"), L=pmf.num("L"), measured=_dist(pmf.sub("measured", None)),
                    laws={n: d for n, d in ((n, _dist(pmf.sub("laws").sub(n, None)))
                                            for n in (pmf.sub("laws", {}) or _Reader({}, "")).d) if d is not None}))


def from_dict(d):
    """A Result from a schema-1 dict (see the module docstring); ValueError naming what is wrong."""
    r = _Reader(d, "")
    v = r.get("schema_version")
    if v != SCHEMA_VERSION:
        raise ValueError(f"schema_version {v!r}: this foxwindow reads per-head results of schema {SCHEMA_VERSION}")
    kind = r.get("kind", KIND)
    if kind != KIND:
        raise ValueError(f"kind {kind!r}: not a per-head result (kind {KIND!r})")
    src = r.sub("source", None) or _Reader({}, "source")
    cat = r.sub("laws", {}) or _Reader({}, "laws")
    laws = {}
    for name in cat.d:
        li = cat.sub(name)
        laws[name] = LawInfo(label=str(li.get("label", name)), description=str(li.get("description", "")))
    heads = [_head(_Reader(h, f"heads[{i}]")) for i, h in enumerate(r.list("heads"))]
    seen = {}
    for i, h in enumerate(heads):
        if (h.layer, h.head) in seen:
            raise ValueError(f"heads[{i}]: layer {safety.shown(h.layer)!r} head {h.head} is listed twice (also "
                             f"heads[{seen[h.layer, h.head]}]); every head once")
        seen[h.layer, h.head] = i
    for h in heads:                         # laws met in the records but not in the catalogue: appended
        for a in h.at:
            for n in a.laws:
                laws.setdefault(n, LawInfo(label=n))
    return Result(source=Source(what=str(src.get("what", "?")), path=src.get("path", None),
                                family=str(src.get("family", "?")), unit=str(src.get("unit", "head") or "head"),
                                n_seq=src.get("n_seq", None), seq_len=src.get("seq_len", None),
                                seed=src.get("seed", None), split=src.get("split", None)),
                  lead_law=r.get("lead_law", None), alpha=r.num("alpha", None), laws=laws, heads=heads,
                  foxwindow_version=r.get("foxwindow_version", None), note=str(r.get("note", "") or ""))


def as_dict(obj):
    """The JSON dict of obj: a dict as it is, a path (str or os.PathLike) read from its file, anything
    with to_json() (the analysis result) through that. Raises ValueError for anything else, and for a file that is
    not JSON ("not a JSON file (why)", without the path: the caller names it)."""
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        try:
            with open(obj, encoding="utf-8") as fh:
                return json.load(fh)
        except safety.JSON_ERRORS as exc:                                # (the caller names the file)
            why = safety.json_error(exc)
            raise ValueError(f"not a JSON file ({why})") from None
    if hasattr(obj, "to_json"):
        d = obj.to_json()
        return json.loads(d) if isinstance(d, str) else d
    raise ValueError(f"expected a per-head result: a dict, a JSON path or an object with to_json(); "
                     f"got {type(obj).__name__}")


def read(obj):
    """A Result from a schema-1 dict, a JSON path, an object with to_json() or a Result (returned as it is).
    The earlier {info, heads} JSON is converted (legacy.convert; Result.note says what it lacks)."""
    if isinstance(obj, Result):
        return obj
    d = as_dict(obj)
    if isinstance(d, dict) and "schema_version" not in d and "info" in d and "heads" in d:
        d = legacy.convert(d)
    return from_dict(d)
