"""Reports, figures and comparisons of per-head results (the schema-1 JSON of `forget.py --json`).

    plot_head(result, head="0.3", eps=1e-3)   one head's figure (matplotlib Figure)
    plot_overview(result, eps=1e-3)           the model at a glance (matplotlib Figure)
    plot_laws(result, which="var")            every head against every law: each law's Var[W] (or E[W]) over
                                              the measured one against L, one panel per head (Figure)
    write_report(result, out)                 the HTML report: index.html, a page per layer, the PNGs
    compare.compare(a, b)                     two results head by head, as a dict (compare.table: its lines)
    read(result)                              the parsed result (schema.Result)

`result` is a schema-1 dict, a path to its JSON, anything with to_json() or a schema.Result. The commands:
`foxwindow report RESULT.json`, `foxwindow compare A.json B.json`, `python forget.py ... --report DIR`.
Names are imported on first use, so `import foxwindow.report` does not load matplotlib.
"""
import importlib

_WHERE = {"plot_head": "plots", "plot_overview": "plots", "plot_laws": "plots", "write_report": "command",
          "read": "schema"}
__all__ = list(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        return getattr(importlib.import_module(f"foxwindow.report.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'foxwindow.report' has no attribute {name!r}")
