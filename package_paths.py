"""Where the files shipped with foxwindow are, in a source checkout and after `pip install .`.

A source checkout keeps them beside the modules (checkpoints/fox_shakespeare.pt); an installed copy has
them under <prefix>/share/foxwindow/ (pyproject's data-files), so commands work from any folder.
"""
import os
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))


def data_path(rel):
    """Absolute path of shipped file `rel` (e.g. "checkpoints/fox_shakespeare.pt"): beside this module
    if there, else under the install prefix's share/foxwindow. When neither exists the source-tree path
    is returned, so that a missing-file error names where it was looked for."""
    cands = [os.path.join(HERE, rel), os.path.join(HERE, "share", "foxwindow", rel)]   # source; pip --target
    for prefix in (sysconfig.get_path("data"), sys.prefix, getattr(sys, "base_prefix", sys.prefix)):
        cands.append(os.path.join(prefix, "share", "foxwindow", rel))
    for c in cands:
        if os.path.exists(c):
            return c
    return cands[0]
