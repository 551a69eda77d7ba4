"""The earlier per-head JSON ({info, heads: [HeadResult fields]}, written by `forget.py --json` before
schema 1) as a schema-1 dict, so saved results of that shape still make a report and a comparison.

What that shape lacks stays absent: no window pmf (the report says so instead of drawing one), only the
median of the measured window (Kaplan-Meier), and one verdict per head on the tested (document-mixture)
law, mapped here onto each L: "not claimed" outside the regime (with the regime's reason), the head's
verdict inside it (an undetermined head: undetermined at every L). The laws it carries: iid (sigma^2 L /
kappa^3), dependent (sigma_LR^2 L / kappa^3 with tau(n) at n = L/kappa), mixture (the tested law) and
bootstrap (the block-bootstrap prediction, with its out-of-sample score).
"""
import math

__all__ = ["LAWS", "NOTE", "convert"]

LAWS = {
    "iid": ("two-moment renewal law", "E[W] and Var[W] = sigma^2 L / kappa^3 of independent increments"),
    "dependent": ("tau-adjusted law", "Var[W] = sigma^2 tau(n) L / kappa^3 at n = L / kappa"),
    "mixture": ("document mixture", "each document its own rate: the tested law of the verdict"),
    "bootstrap": ("block bootstrap", "document-stratified block bootstrap of the head's own increments (reference)"),
}
NOTE = ("converted from the earlier per-head JSON: no window distribution, only the median of the measured "
        "window, one verdict per head (the document-mixture law's) mapped onto its L")


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _item(lst, k):
    return lst[k] if isinstance(lst, list) and k < len(lst) else None


def _source(info):
    ck = str(info.get("checkpoint") or "")
    model = str(info.get("model") or "")
    fams = info.get("families") or []
    if fams:
        what, family = "model", ("fla-" + fams[0] if len(fams) == 1 else "fla-" + "+".join(fams))
        unit = "channel" if info.get("per_channel") else "head"
    else:
        what = "traces" if ck.endswith(".npz") else ("shipped" if ck.endswith("fox_shakespeare.pt") else "model")
        family = "lstm" if "lstm" in model.lower() else "fox"
        unit = "unit" if family == "lstm" else "head"
    seed = info.get("seed")
    return {"what": what, "path": ck or None, "family": family, "unit": unit, "n_seq": info.get("n_seq"),
            "seq_len": info.get("analysed_len", info.get("seq_len")), "seed": seed, "split": "held-out"}


def _states(h, k, alpha_test):
    """{law: (state, why)} at the k-th L of a head from its one verdict."""
    verdict = h.get("verdict", "")
    if verdict == "undetermined":            # data reasons (too few documents, every window censored): at every L
        why = "; ".join(h.get("reasons") or []) or verdict
        return {n: ("undetermined", why) for n in ("iid", "dependent", "mixture")}
    if not _item(h.get("in_regime"), k):
        why = _item(h.get("regime_why"), k) or "outside the regime the laws claim"
        return {n: ("not claimed", why) for n in ("iid", "dependent", "mixture")}
    p_iid = _num(h.get("p_iid"))
    iid_false = p_iid is not None and alpha_test is not None and p_iid < alpha_test
    why = "; ".join(h.get("reasons") or []) or verdict
    if verdict == "law holds":
        dep = ("holds", why)
        iid = ("holds", why) if h.get("law") == "iid" else (("false" if iid_false else "undetermined"), why)
    elif verdict == "law false":
        dep = ("false", why)
        iid = ("false" if iid_false else "undetermined", why)
    else:                                   # pre-asymptotic (too few L in the regime) or undetermined
        dep = iid = ("undetermined", why)
    return {"iid": iid, "dependent": dep, "mixture": dep}


def _at(h, k, alpha_test):
    cens = _num(_item(h.get("censored_frac"), k)) or 0.0
    mean = _num(_item(h.get("mean_W"), k)) if cens == 0 else _num(_item(h.get("km_mean"), k))
    med = _num(_item(h.get("km_median"), k))
    states = _states(h, k, alpha_test)
    laws = {}
    for name, mkey, vkey in (("iid", "law_mean", "law_var_iid"), ("dependent", "law_mean", "law_var_lr"),
                             ("mixture", None, "law_var_mix")):
        var = _num(_item(h.get(vkey), k))
        laws[name] = {"mean": _num(_item(h.get(mkey), k)) if mkey else None, "var": var, "quantiles": None,
                      "var_ratio": None, "var_ratio_ci": None, "state": states[name][0], "claim": None,
                      "why": states[name][1]}
    q = [_num(_item(h.get(f"pred_q{p}"), k)) for p in ("05", "50", "95")]
    laws["bootstrap"] = {
        "mean": _num(_item(h.get("pred_mean"), k)), "var": _num(_item(h.get("pred_var"), k)),
        "quantiles": None if None in q else {"0.05": q[0], "0.5": q[1], "0.95": q[2]},
        "var_ratio": None, "var_ratio_ci": None, "state": "not claimed", "claim": None, "why": "the reference",
        "oos": {"coverage": _num(_item(h.get("oos_coverage"), k)),
                "coverage_se": _num(_item(h.get("oos_se_coverage"), k)),
                "z_mean": _num(_item(h.get("oos_z_mean"), k)), "z_var": _num(_item(h.get("oos_z_var"), k)),
                "censored_share": _num(_item(h.get("oos_censored"), k))}}
    return {"eps": h["eps_list"][k], "L": h["L_list"][k],
            "measured": {"mean": mean, "var": _num(_item(h.get("var_W"), k)) if cens == 0 else None,
                         "mean_se": _num(_item(h.get("se_mean_W"), k)) if cens == 0 else None,
                         "var_se": _num(_item(h.get("se_var_W"), k)) if cens == 0 else None,
                         "censored_share": cens, "quantiles": {} if med is None else {"0.5": med}},
            "laws": laws}


def _head(h, alpha_test):
    verdict = h.get("verdict", "")
    law = h.get("law") or None
    holds = law if verdict == "law holds" else None
    text = verdict + (f" ({law})" if law else "") + (f": {'; '.join(h['reasons'])}" if h.get("reasons") else "")
    has_mass = h.get("mass_eps") is not None
    return {
        "layer": str(h["layer"]), "head": int(h["head"]), "label": f"{h['layer']}.{h['head']}",
        "kappa": _num(h.get("kappa")), "sigma2": _num(h.get("sigma2")), "tau": _num(h.get("tau")),
        "tau_se": _num(h.get("se_tau")),
        "summary": {"mean_law": holds, "var_law": holds, "false": ["mixture"] if verdict == "law false" else [],
                    "text": text},
        "dependence": {"n": h.get("n_list") or [], "tau_n": h.get("tau_n") or [], "tau_n_se": h.get("se_tau_n") or [],
                       "levelled_at": None},
        "mass": ({"eps": h["mass_eps"], "decay_window": _num(h.get("decay_window_mean")),
                  "mass_window": _num(h.get("mass_window_mean"))} if has_mass else None),
        "at": [_at(h, k, alpha_test) for k in range(len(h.get("eps_list") or []))],
        "pmf": None,
    }


def convert(d):
    """The earlier {info, heads} dict as a schema-1 dict (see the module docstring)."""
    info, heads = d.get("info") or {}, d.get("heads")
    if not isinstance(heads, list):
        raise ValueError("not a per-head result: 'heads' is not a list")
    for i, h in enumerate(heads):
        if not isinstance(h, dict) or not {"layer", "head", "eps_list", "L_list"} <= set(h):
            raise ValueError(f"not a per-head result: heads[{i}] lacks layer, head, eps_list or L_list")
    alpha_test = _num(info.get("alpha_test"))
    return {"schema_version": 1, "foxwindow_version": None, "kind": "heads", "source": _source(info),
            "lead_law": "mixture", "alpha": _num(info.get("alpha")),
            "laws": {n: {"label": lab, "description": desc} for n, (lab, desc) in LAWS.items()},
            "heads": [_head(h, alpha_test) for h in heads], "note": NOTE}
