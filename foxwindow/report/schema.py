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


MAX_ABS = 1e100                 # no window, rate or score of a result comes near: a larger one is a crafted file
MAX_INT = 2 ** 53
MAX_TEXT = 1 << 16              # characters of one name or text of a result (its notes, a law's why, a label)


def _text(v, name):
    if len(v) > MAX_TEXT:
        raise ValueError(f"{name}: a text of {len(v)} characters; a name or note of a result holds at most {MAX_TEXT}")
    return v


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
        return _finite(v, self._name(key))

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
            out.append(None if v is None else _finite(v, f"{self._name(key)}[{i}]"))
        return out

    def str(self, key, default=MISSING):
        """A string or null (a number is written as text: layer names, versions)."""
        v = self.get(key, default)
        if isinstance(v, str):
            return _text(v, self._name(key))
        if v is None:
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        raise ValueError(f"{self._name(key)}: expected a string or null; got {_brief(v)}")

    def int(self, key, default=MISSING, lo=0, hi=MAX_INT):
        v = self.get(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
            span = f"from {lo} to {hi}" if hi is not None else f">= {lo}"
            raise ValueError(f"{self._name(key)}: expected an integer {span} or null; got {_brief(v)}")
        return v

    def flag(self, key, default=False):
        v = self.get(key, default)
        if not isinstance(v, bool):
            raise ValueError(f"{self._name(key)}: expected true or false; got {_brief(v)}")
        return v

    def quantiles(self, key):
        """A {level: window} object, or null."""
        v = self.get(key, None)
        if v is None:
            return None
        if not isinstance(v, dict):
            raise ValueError(f"{self._name(key)}: expected an object of quantiles or null; got {_brief(v)}")
        return {k: None if x is None else _finite(x, f"{self._name(key)}.{k}") for k, x in v.items()}

    def strings(self, key):
        out = self.list(key, None)
        for i, v in enumerate(out):
            if not isinstance(v, str):
                raise ValueError(f"{self._name(key)}[{i}]: expected a law name (a string); got {_brief(v)}")
        return list(out)


def _brief(v):
    """A value for a message: escaped, at most 60 characters."""
    t = safety.shown(repr(v))
    return t if len(t) <= 60 else t[:57] + "..."


def _finite(v, name):
    """float(v) of a JSON number; ValueError naming the field for NaN, Infinity or a magnitude past MAX_ABS."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{name}: expected a number or null; got {_brief(v)}")
    if isinstance(v, float) and not math.isfinite(v):   # JSON has no NaN or Infinity: the writer puts null there
        raise ValueError(f"{name}: expected a finite number or null; got {v!r}")
    if abs(v) > MAX_ABS:
        shown = f"a number of {len(str(abs(v)))} digits" if isinstance(v, int) else format(v, "g")
        raise ValueError(f"{name}: {shown} is beyond {MAX_ABS:g}: not a window, rate or score of a result")
    return float(v)


def _dist(r):
    """A distribution {offset, p}, or None where the result holds none (e.g. every window censored)."""
    if r is None:
        return None
    off = r.get("offset")
    if isinstance(off, bool) or not isinstance(off, int) or not 0 <= off <= MAX_INT:
        raise ValueError(f"{r._name('offset')}: expected an integer window >= 0; got {_brief(off)}")
    p = [0.0 if v is None else v for v in r.nums("p")]
    for i, v in enumerate(p):
        if v < 0:
            raise ValueError(f"{r._name('p')}[{i}]: {v:g} < 0 (a probability)")
    return Dist(offset=off, p=p)


def _law_at(r):
    o = r.sub("oos", None)
    cov = r.num("coverage90", None)                     # the out-of-sample coverage of the law's 90% interval
    state = r.get("state", "not claimed")
    state = "not claimed" if state is None or state == "" else state
    if not isinstance(state, str) or state not in STATES:
        raise ValueError(f"{r._name('state')}: {_brief(state)} is not one of {', '.join(STATES)}")
    ci = r.nums("var_ratio_ci", None)
    if ci and (len(ci) != 2 or None in ci):
        raise ValueError(f"{r._name('var_ratio_ci')}: expected two numbers (an interval) or null; got {len(ci)} "
                         "values" + (" with a null" if len(ci) == 2 else ""))
    return LawAt(mean=r.num("mean", None), var=r.num("var", None), quantiles=r.quantiles("quantiles"),
                 var_ratio=r.num("var_ratio", None), var_ratio_ci=list(ci) if ci else None, state=state,
                 claim=r.num("claim", None), why=r.str("why", "") or "",
                 oos=(Oos(coverage=o.num("coverage", None), coverage_se=o.num("coverage_se", None),
                          z_mean=o.num("z_mean", None), z_var=o.num("z_var", None),
                          censored_share=o.num("censored_share", None)) if o is not None else
                      Oos(coverage=cov) if cov is not None else None))


def _eps(r):
    """A record's threshold eps, in (0, 1); ValueError naming the field."""
    eps = r.num("eps")
    if eps is None or not 0 < eps < 1:
        raise ValueError(f"{r._name('eps')}: expected a threshold in (0, 1); got {eps!r}")
    return eps


def _eps_L(r):
    """A record's threshold (eps, L): eps in (0, 1) and L = ln(1/eps) (rounded: allowed); ValueError naming the
    field."""
    eps, L = _eps(r), r.num("L")
    if L is None or abs(L - math.log(1 / eps)) > 0.01 * max(1.0, math.log(1 / eps)):
        raise ValueError(f"{r._name('L')}: expected ln(1/eps) = {math.log(1 / eps):.6g} for eps {eps:g}; got {L!r}")
    return eps, L


def _at(r):
    m = r.sub("measured")
    laws = r.sub("laws", {}) or _Reader({}, r._name("laws"))
    eps, L = _eps_L(r)
    measured = Measured(mean=m.num("mean"), var=m.num("var"), mean_se=m.num("mean_se", None),
                        var_se=m.num("var_se", None), censored_share=m.num("censored_share", 0.0) or 0.0,
                        quantiles=m.quantiles("quantiles") or {}, is_bound=m.flag("mean_is_bound", False))
    for key in ("mean", "var", "mean_se", "var_se"):
        v = getattr(measured, key)
        if v is not None and v < 0:
            raise ValueError(f"{m._name(key)}: {v:g} < 0 (a window's {key.replace('_', ' ')} is >= 0)")
    if not 0 <= measured.censored_share <= 1:
        raise ValueError(f"{m._name('censored_share')}: {measured.censored_share:g} is not a share in [0, 1]")
    return At(eps=eps, L=L, measured=measured, laws={name: _law_at(laws.sub(name)) for name in laws.d})


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
    if not (isinstance(layer, str) or (isinstance(layer, int) and not isinstance(layer, bool))):
        raise ValueError(f"{r._name('layer')}: expected a layer name (a string or an integer); got {_brief(layer)}")
    kappa = r.num("kappa", None)
    if kappa is not None and kappa < 0:
        raise ValueError(f"{r._name('kappa')}: {kappa:g} < 0 (kappa is the mean of -log g)")
    for key in ("sigma2", "tau_se"):
        v = r.num(key, None)
        if v is not None and v < 0:
            raise ValueError(f"{r._name(key)}: {v:g} < 0 (a variance or standard error is >= 0)")
    raw = [_at(_Reader(a, f"{r._name('at')}[{k}]")) for k, a in enumerate(r.list("at"))]
    seen = {}
    for k, a in enumerate(raw):
        key = round(a.L, 6)
        if key in seen:
            raise ValueError(f"{r._name('at')}[{k}]: eps {a.eps:g} is listed twice (also "
                             f"{r._name('at')}[{seen[key]}]); "
                             "every eps once")
        seen[key] = k
    _prediction_scores(r.sub("prediction", None), raw)
    at = sorted(raw, key=lambda a: a.L)
    label = r.get("label", f"{layer}.{head}")
    if not isinstance(label, str) or not label:
        raise ValueError(f"{r._name('label')}: expected a non-empty string; got {_brief(label)}")
    _text(label, r._name("label"))
    if isinstance(layer, str):
        _text(layer, r._name("layer"))
    if dep is not None:
        n, tn, ts = dep.nums("n"), dep.nums("tau_n"), dep.nums("tau_n_se", None)
        if len(tn) != len(n) or (ts and len(ts) != len(n)):
            raise ValueError(f"{dep._name('tau_n')}: {len(tn)} values" + (f" (tau_n_se {len(ts)})" if ts else "")
                             + f" for {len(n)} lags n; expected one a lag")
        dep.int("levelled_at", None)
    if mass is not None:
        _eps(mass)
        for key in ("decay_window", "mass_window"):
            v = mass.num(key, None)
            if v is not None and v < 0:
                raise ValueError(f"{mass._name(key)}: {v:g} < 0 (a window is >= 0 tokens)")
    if pmf is not None:
        _eps_L(pmf)
    return Head(layer=str(layer), head=int(head), label=label,
                kappa=kappa, sigma2=r.num("sigma2", None), tau=r.num("tau", None),
                tau_se=r.num("tau_se", None),
                summary=Summary(mean_law=s.str("mean_law", None), var_law=s.str("var_law", None),
                                var_claim=s.num("var_claim", None), false=s.strings("false"),
                                text=s.str("text", "") or ""),
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
        laws[name] = LawInfo(label=li.str("label", name) or name, description=li.str("description", "") or "")
    heads = [_head(_Reader(h, f"heads[{i}]")) for i, h in enumerate(r.list("heads"))]
    seen, labels = {}, {}
    for i, h in enumerate(heads):
        if h.label in labels:
            raise ValueError(f"heads[{i}].label: {safety.shown(h.label)!r} is listed twice (also "
                             f"heads[{labels[h.label]}]); "
                             "every label once (heads are matched by it)")
        labels[h.label] = i
        if (h.layer, h.head) in seen:
            raise ValueError(f"heads[{i}]: layer {safety.shown(h.layer)!r} head {h.head} is listed twice (also "
                             f"heads[{seen[h.layer, h.head]}]); every head once")
        seen[h.layer, h.head] = i
    for h in heads:                         # laws met in the records but not in the catalogue: appended
        for a in h.at:
            for n in a.laws:
                laws.setdefault(n, LawInfo(label=n))
    unit = src.str("unit", "head") or "head"
    if unit not in UNIT_WORDS:
        raise ValueError(f"source.unit: {_brief(unit)} is not one of {', '.join(UNIT_WORDS)}")
    lead = r.str("lead_law", None)
    if lead is not None and lead not in laws:
        raise ValueError(f"lead_law: {_brief(lead)} is not one of the result's laws ({', '.join(laws) or 'none'})")
    alpha = r.num("alpha", None)
    if alpha is not None and not 0 < alpha < 1:
        raise ValueError(f"alpha: {alpha:g} is not a level in (0, 1)")
    return Result(source=Source(what=src.str("what", "?") or "?", path=src.str("path", None),
                                family=src.str("family", "?") or "?", unit=unit,
                                n_seq=src.int("n_seq", None, lo=1), seq_len=src.int("seq_len", None, lo=1),
                                seed=src.int("seed", None, hi=None), split=src.str("split", None)),
                  lead_law=lead, alpha=alpha, laws=laws, heads=heads,
                  foxwindow_version=r.str("foxwindow_version", None), note=r.str("note", "") or "")


def as_dict(obj):
    """The JSON dict of obj: a dict as it is, a path (str or os.PathLike) read from its file, anything
    with to_json() (the analysis result) through that. Raises ValueError for anything else, and for a file that is
    not JSON ("not a JSON file (why)", without the path: the caller names it)."""
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        try:
            # utf-8-sig: a byte-order mark at the start (some editors write one) is read past, as JSON allows
            with open(obj, encoding="utf-8-sig") as fh:
                return json.load(fh)
        except UnicodeDecodeError as exc:
            bad = exc.object[exc.start:exc.start + 1]
            raise ValueError(f"not a JSON file (not UTF-8 text: byte {exc.start} is {bad!r})") from None
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
