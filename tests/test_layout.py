"""The package's layout: the import graph of foxwindow/ (every import, at module level or inside a function) has
no circle, no module imports another's private name, and imports inside functions are only those of optional or
heavy dependencies, each with a comment saying which."""
import ast
import os
import sys

from conftest import REPO

PACKAGE = os.path.join(REPO, "foxwindow")

# imports a function may make on use: optional dependencies (extras), heavy ones a light command does not pay for
# (numpy and torch in outputs, which imports only the standard library),
# and parts of torch that only some runs reach
ON_USE = ("numpy", "triton", "fla", "flash_attn", "transformers", "safetensors", "h5py", "matplotlib", "torch",
          "foxwindow.kernels", "tensorflow", "mpmath", "numba", "huggingface_hub")


def _modules():
    """{dotted name: (path, ast tree)} of every module of the package."""
    out = {}
    for root, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                name = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
                with open(path) as fh:
                    out[name] = (path, ast.parse(fh.read(), path))
    return out


def _imports(name, tree, modules):
    """[(node, target module, [imported names], inside a function)] of one module's imports of the package."""
    is_pkg = modules[name][0].endswith("__init__.py")
    base = name if is_pkg else name.rsplit(".", 1)[0]
    found = []

    def visit(node, in_func):
        for child in ast.iter_child_nodes(node):
            inner = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                mod = child.module or ""
                if child.level:
                    parts = base.split(".")
                    mod = ".".join(parts[: len(parts) - child.level + 1] + ([mod] if mod else []))
                for a in child.names:
                    sub = f"{mod}.{a.name}"
                    if sub in modules:
                        found.append((child, sub, [], in_func))
                    elif mod in modules:
                        found.append((child, mod, [a.name], in_func))
            elif isinstance(child, ast.Import):
                for a in child.names:
                    if a.name in modules:
                        found.append((child, a.name, [], in_func))
            visit(child, inner)
    visit(tree, False)
    return found


def test_no_import_circle():
    modules = _modules()
    graph = {n: set() for n in modules}
    for n, (_, tree) in modules.items():
        for _, target, _, _ in _imports(n, tree, modules):
            if target != n:
                graph[n].add(target)
    # a package's __init__ importing its own modules is how a package presents them: not an edge back
    for n in graph:
        graph[n] = {t for t in graph[n] if not (n.startswith(t + ".") and modules[t][0].endswith("__init__.py"))}
    state, stack, circles = {}, [], []

    def dfs(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                circles.append(stack[stack.index(v):] + [v])
            elif v not in state:
                dfs(v)
        stack.pop()
        state[u] = 2
    sys.setrecursionlimit(10_000)
    for n in sorted(graph):
        if n not in state:
            dfs(n)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_no_module_imports_another_modules_private_name():
    modules = _modules()
    bad = []
    for n, (path, tree) in modules.items():
        aliases = {}
        for node, target, names, _ in _imports(n, tree, modules):
            if target == n:
                continue
            bad += [f"{n}: from {target} import {x}" for x in names if x.startswith("_") and not x.startswith("__")]
            if not names:
                for a in node.names:
                    if target.endswith("." + a.name) or target == a.name:
                        aliases[a.asname or a.name.split(".")[-1]] = target
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{n}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


def test_imports_inside_functions_are_optional_or_heavy_and_say_so():
    modules = _modules()
    bad = []
    for n, (path, tree) in modules.items():
        with open(path) as fh:
            lines = fh.read().splitlines()
        parents = {}
        for node in ast.walk(tree):
            for c in ast.iter_child_nodes(node):
                parents[c] = node
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            p, in_func = node, False
            while p in parents:
                p = parents[p]
                if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    in_func = True
                    break
            if not in_func:
                continue
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            ok = all(m.split(".")[0] in ON_USE or m.startswith(ON_USE) for m in mods)
            # the comment on the import's line, or the line above it
            said = "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
            if not (ok and said):
                bad.append(f"{n}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not bad, "imports inside functions (only optional or heavy dependencies, with a comment):\n" + "\n".join(bad)
